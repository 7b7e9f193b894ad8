"""The optional compiled text lane (chatsieve/_lane.c): built where a C compiler is found; without
it, chatsieve runs the same path in Python (`chatsieve.server.backends.compiled_lane` is then None)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("chatsieve._lane", ["chatsieve/_lane.c"], optional=True)])
