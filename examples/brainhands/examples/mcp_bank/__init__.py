"""Tools from an MCP server on a Hands pool: a bank whose deposits land exactly once.

``server.py`` is the bank, an MCP server with its own SQLite ledger that dedupes deposits
on the operation id the Hands sends; ``mcp.json`` is the Hands' configuration (the server
trusted, ``find_deposit`` named as the lookup of ``deposit``); ``agent.py`` is the
``teller`` agent, which deposits and reads the balance. It needs the ``mcp`` SDK:
``pip install -e './examples[mcp]'`` (the development install of ``scripts/setup`` has it).
From the repository's root, each in a shell of its own with the virtualenv activated (the
Hands starts the server as ``python -m ...``), RabbitMQ and Redis on their local ports and
the embedded SQLite store::

    BANK_LEDGER=$PWD/bank.db \\
    BRAINHANDS_MCP_CONFIG=examples/brainhands/examples/mcp_bank/mcp.json \\
        brainhands hands --pool bank
    brainhands brain --compat v1 --agents brainhands.examples.mcp_bank.agent
    brainhands submit --session bank-1 --request-id r1 --wait 60 \\
        '{"agent": "teller", "text": "Put 5 in the account of ann."}'
    brainhands show bank-1                               # the calls and their operation ids
    sqlite3 bank.db 'select * from deposits'             # one row, under that of bank.deposit
"""
