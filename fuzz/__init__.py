"""Coverage-guided fuzzing (atheris/libFuzzer) of the codecs and the transceiver's entry point.

One module per target (``fuzz_<target>.py``), a seed corpus per target under ``corpus/``, and a
bounded runner: ``python -m fuzz.run <target> --seconds 60``. docs/fuzzing.md says what each target
checks and how to run longer campaigns. Nothing here is imported by the product.
"""
