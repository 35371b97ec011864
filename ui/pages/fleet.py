"""Page entry point (st.navigation runs this file); the view lives in ui.views.fleet."""
from ui.views.fleet import render

render()
