"""The coder: an agent that fixes a small Python project in its session's workspace.

Its model (scripted, so the example runs with no network) runs the project's tests in a
sandbox, reads that they fail, rewrites the faulty file, runs the tests again, and answers
with the diff of its edit once they pass. Every edit and every test run is a tool call on
the ``coder`` Hands pool working in the workspace ``project``: each success commits the
workspace's next version with its outcome, so a Hands or Brain killed at any point leaves
the workspace at a committed version, and the run ends with the same files as a run that
was never interrupted.

    brainhands hands --pool coder --tools brainhands.examples.coder.tools
    brainhands brain --agents brainhands.examples.coder.agent
    # give session s1 the project, then ask the coder to fix it
    python -m brainhands.examples.coder s1
"""
