"""Page entry point (st.navigation runs this file); the view lives in ui.views.compare."""
from ui.views.compare import render

render()
