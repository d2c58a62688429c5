"""Building blocks shared by several methods (training loop glue, plotting)."""
