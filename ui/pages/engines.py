"""Page entry point (st.navigation runs this file); the view lives in ui.views.engines."""
from ui.views.engines import render

render()
