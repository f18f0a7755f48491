"""The measurement kit: one runnable module per lab plus the shared harness, load generator and metrics readers."""
