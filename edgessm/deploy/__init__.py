"""Deployment: stepwise ONNX export of streaming networks, verification, quantization, op census."""
