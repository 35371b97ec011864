"""Page entry point (st.navigation runs this file); the view lives in ui.views.memory."""
from ui.views.memory import render

render()
