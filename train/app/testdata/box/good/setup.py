from setuptools import find_packages, setup

setup(name="trainer", version="0.1", packages=find_packages())
