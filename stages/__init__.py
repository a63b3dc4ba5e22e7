"""The pipeline, one package per stage: admit -> entitle -> place -> launch."""
