"""The operator's commands around a lab: preflight before `up`, status after `destroy`, what a lab
costs (estimated from a dated price table, and actual from the Cloud Billing export)."""
