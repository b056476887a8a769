"""Pydantic request and response models; the OpenAPI document is generated from them."""
