"""Page entry point (st.navigation runs this file); the view lives in ui.views.stages."""
from ui.views.stages import render

render()
