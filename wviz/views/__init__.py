"""What each page computes, one module per page (the page's stem): library calls in, result objects out, no
streamlit and no drawing, so that every number a page shows is tested with plain pytest (tests/views)."""
