"""The command-line layer: one module per stage, each a thin flag parser over the stage's
typed entry point (`run(config) -> result`), and nothing else parses flags.

    twotower/commands/<stage>.py
      build_parser() -> argparse.ArgumentParser
      parse(argv) -> the stage's config dataclass
      main(argv)   -> parse, run the stage, print its result table

`twotower <stage> ...` and `python -m twotower.<package>.<module> ...` both go through
`twotower.cli.run_stage`, so logging, exit codes and error lines are the same.
"""
