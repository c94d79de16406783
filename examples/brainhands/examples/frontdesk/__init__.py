"""An AgentScope agent run by brainhands: a hotel's front desk that books a room and tells
the guest, the booking landing in its ledger once.

``agent.py`` builds an ``agentscope.agent.Agent`` (the ReAct agent) as any AgentScope
application would: a system prompt, a model, a ``Toolkit`` of two function tools, each given
AgentScope's permission to run without a person's confirmation; and hosts it with ``host``:
``book_room`` is declared ``query`` (its query looks the booking up by the operation id),
``notify_guest`` is left ``unsafe``. The one module serves both roles: the Hands run the
tools, the Brain AgentScope's ReAct loop. The model is a ``Script`` (an AgentScope
``ChatModelBase``) playing a script, so the example runs with no network; give the agent
any model AgentScope has (``OpenAIChatModel(OpenAICredential(api_key=...), "gpt-5")``, say)
to drive it for real. It needs the ``agentscope`` extra (``pip install -e
'./examples[agentscope]'``; the development install has it). From the repository's root,
each in a shell of its own, RabbitMQ and Redis on their local ports and the embedded SQLite
store::

    FRONTDESK_LEDGER=$PWD/frontdesk.db \\
        brainhands hands --pool frontdesk --tools brainhands.examples.frontdesk.agent
    FRONTDESK_LEDGER=$PWD/frontdesk.db \\
        brainhands brain --compat v1 --agents brainhands.examples.frontdesk.agent
    brainhands submit --session desk-1 --request-id r1 --wait 60 \\
        '{"agent": "frontdesk", "text": "Two nights for Ada Lovelace, please."}'
    brainhands show desk-1                               # the model's answers, the calls
    sqlite3 frontdesk.db 'select * from bookings'        # one row, under book_room's id
"""
