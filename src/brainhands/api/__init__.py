"""The HTTP API (``brainhands api``): submit, read, cancel, approve, deny, signal and watch
sessions over HTTP, each request on behalf of an API key's tenant."""
