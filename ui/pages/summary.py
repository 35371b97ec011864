"""Page entry point (st.navigation runs this file); the view lives in ui.views.summary."""
from ui.views.summary import render

render()
