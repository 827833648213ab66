"""Training: configs, tasks (classification, waveform, CTC), the trainer (AMP, DDP, exact resume)."""
