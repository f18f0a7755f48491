"""Lab g6's experiments beside the max-num-seqs sweep: the KV cache as the limit (kv) and what
quantization costs and buys (quant). Both measure their points through sweep.measure_point."""
