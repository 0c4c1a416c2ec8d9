"""The model core: weights, preprocessing, engines and ONNX export. Imports nothing of delivery or measuring."""
