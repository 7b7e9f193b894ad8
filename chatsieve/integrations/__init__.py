"""Adapters that run chatsieve inside other serving stacks (`chatsieve.integrations.vllm`).

Each adapter is imported on its own and needs its host installed; the core never imports them.
"""
