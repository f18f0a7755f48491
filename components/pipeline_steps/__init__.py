"""The g7 workflow's step programs, run by Argo in a pinned Python image (see components/argo.py).

Each reads its inputs from environment variables and exits non-zero when the workflow parameter
`fail_step` names it, so the lab can show what a failed step does to the DAG.
"""
