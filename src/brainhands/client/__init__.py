"""What an application uses to reach a deployment: ``direct`` (``Client``: the store and
the broker), ``http`` (``HttpClient``: the API, with a key), and ``approvals`` (the
decisions both make)."""
