"""A LangGraph graph run by brainhands: a bookkeeper graph whose sale lands in its ledger once.

``graph.py`` builds a ReAct graph as any LangGraph application would (a model node, a
``ToolNode`` of two tools, ``tools_condition`` between them), compiles it, and hosts it with
``host``: ``record_sale`` is declared ``query`` (its query looks the sale up by the
operation id), ``send_invoice`` is left ``unsafe``. The one module serves both roles: the
Hands run the ``ToolNode``'s tools, the Brain the graph, its checkpoints in the session
store. The model is a small scripted chat model, so the example runs with no network; put
any LangChain chat model in its place (``init_chat_model("openai:gpt-5").bind_tools(...)``)
to drive it for real. It needs the ``langgraph`` extra (``pip install -e
'./examples[langgraph]'``; the development install has it). From the repository's root,
each in a shell of its own, RabbitMQ and Redis on their local ports and the embedded
SQLite store::

    BOOKS_LEDGER=$PWD/books.db \\
        brainhands hands --pool books --tools brainhands.examples.graph_bookkeeper.graph
    BOOKS_LEDGER=$PWD/books.db \\
        brainhands brain --compat v1 --agents brainhands.examples.graph_bookkeeper.graph
    brainhands submit --session books-1 --request-id r1 --wait 60 \\
        '{"agent": "graph-bookkeeper", "text": "Ann bought tea for 4."}'
    brainhands show books-1                          # the calls and their operation ids
    sqlite3 books.db 'select * from sales'           # one row, under record_sale's id
"""
