# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
