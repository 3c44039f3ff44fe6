"""``python -m fucina.engine build [--variant patched|no-llamafile] [--force] | path [--variant V] | status``."""

from __future__ import annotations

import argparse
import sys

from fucina.engine_selection import engine_dir, read_manifest, selected_dir
from fucina.engine.build import VARIANTS, EngineBuildError, build, engine_ready
from fucina.errors import EngineUnavailable
from fucina.files import drop_stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fucina.engine",
                                description="Build and locate fucina's llama.cpp engine variants.")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, text in (("build", "build a variant into the cache (patched: exact at full speed; ~10 min once)"),
                       ("build-exact", "same as `build --variant patched` (the README's test command)")):
        b = sub.add_parser(name, help=text)
        if name == "build":
            b.add_argument("--variant", choices=VARIANTS, default="patched")
        b.add_argument("--force", action="store_true", help="rebuild even if the variant is built")
    pa = sub.add_parser("path", help="print a variant's directory (exit 1 if it is not built)")
    pa.add_argument("--variant", choices=VARIANTS, default="patched")
    sub.add_parser("status", help="what is built, and which engine FUCINA_ENGINE selects")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.cmd in ("build", "build-exact"):
            print(build(getattr(args, "variant", "patched"), force=args.force))
            return 0
        if args.cmd == "path":
            print(engine_dir(args.variant))
            return 0 if engine_ready(args.variant) else 1
        for v in VARIANTS:
            m = read_manifest(engine_dir(v))
            state = "built " + m.get("built", "?") if m else "not built"
            if m and not engine_ready(v):
                state += " (stale: rebuild with --force)"
            print(f"{v:>13}: {state}  {engine_dir(v)}")
        sel = selected_dir()
        print(f"{'selected':>13}: {sel if sel else 'the installed llama-cpp-python (stock)'}")
        return 0
    except (EngineBuildError, EngineUnavailable) as exc:
        print(f"fucina.engine: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `status | head`: the reader has what it wanted
        drop_stdout()
        return 0


if __name__ == "__main__":
    sys.exit(main())
