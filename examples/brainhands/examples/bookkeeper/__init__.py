"""A Pydantic AI agent run by brainhands: a bookkeeper whose sale lands in its ledger once.

``agent.py`` builds a ``pydantic_ai.Agent`` as any Pydantic AI application would (its
instructions, two function tools, a validated output type, a model) and hosts it with
``host``: ``record_sale`` is declared ``query`` (its query looks the sale up by the
operation id), ``send_invoice`` is left ``unsafe``. The one module serves both roles: the
Hands run its tools, the Brain its loop. The model is a ``FunctionModel`` playing a script,
so the example runs with no network; give the ``Agent`` any model Pydantic AI knows
(``"openai:gpt-5"``, say) to drive it for real. It needs the ``pydantic-ai`` extra
(``pip install -e './examples[pydantic-ai]'``; the development install has it). From the
repository's root, each in a shell of its own, RabbitMQ and Redis on their local ports and
the embedded SQLite store::

    BOOKS_LEDGER=$PWD/books.db \\
        brainhands hands --pool books --tools brainhands.examples.bookkeeper.agent
    BOOKS_LEDGER=$PWD/books.db \\
        brainhands brain --compat v1 --agents brainhands.examples.bookkeeper.agent
    brainhands submit --session books-1 --request-id r1 --wait 60 \\
        '{"agent": "bookkeeper", "text": "Ann bought tea for 4."}'
    brainhands show books-1                          # the calls and their operation ids
    sqlite3 books.db 'select * from sales'           # one row, under record_sale's id
"""
