"""Page entry point (st.navigation runs this file); the view lives in ui.views.rl."""
from ui.views.rl import render

render()
