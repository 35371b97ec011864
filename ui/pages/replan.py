"""Page entry point (st.navigation runs this file); the view lives in ui.views.replan."""
from ui.views.replan import render

render()
