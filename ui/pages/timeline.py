"""Page entry point (st.navigation runs this file); the view lives in ui.views.timeline."""
from ui.views.timeline import render

render()
