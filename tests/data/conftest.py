# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data" / "clipo"  # ../shared/data/clipo from the repo root
PAPER = REPO.parent / "shared" / "paper" / "clipo-paper.tex"


@pytest.fixture
def shared_data() -> Path:
    if not (SHARED / "test").is_dir():
        pytest.skip(
            f"the authors' parquet files are not at {SHARED} (see docs/eval.md: how to get each dataset)"
        )
    return SHARED
