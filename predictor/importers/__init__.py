"""Importers: ONNX files, torch modules and JSON into the graph IR."""
