"""An OpenAI Agents SDK agent run by brainhands: a help desk whose triage agent hands a
refund over to a refunds agent, the refund landing in its ledger once.

``agent.py`` builds two ``agents.Agent``s as any application of the SDK would: ``triage``
(instructions, a handoff to ``refunds``) and ``refunds`` (instructions, two function tools,
an output type), and hosts them with ``host``: ``refund`` is declared ``query`` (its query
looks the refund up by the operation id), ``notify`` is left ``unsafe``. The one module
serves both roles: the Hands run the tools, the Brain the SDK's loop. The model is a
``Script`` (an SDK ``Model``) playing a script, so the example runs with no network; give
the agents any model the SDK knows (``model="gpt-5"``, say) to drive them for real. It
needs the ``openai-agents`` extra (``pip install -e './examples[openai-agents]'``; the
development install has it). From the repository's root, each in a shell of its own,
RabbitMQ and Redis on their local ports and the embedded SQLite store::

    DESK_LEDGER=$PWD/desk.db \\
        brainhands hands --pool desk --tools brainhands.examples.helpdesk.agent
    DESK_LEDGER=$PWD/desk.db \\
        brainhands brain --compat v1 --agents brainhands.examples.helpdesk.agent
    brainhands submit --session desk-1 --request-id r1 --wait 60 \\
        '{"agent": "helpdesk", "text": "Refund order 42, please."}'
    brainhands show desk-1                          # which agent answered, the calls
    sqlite3 desk.db 'select * from refunds'         # one row, under refund's id
"""
