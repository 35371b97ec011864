"""Page entry point (st.navigation runs this file); the view lives in ui.views.whatif."""
from ui.views.whatif import render

render()
