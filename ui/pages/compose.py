"""Page entry point (st.navigation runs this file); the view lives in ui.views.compose."""
from ui.views.compose import render

render()
