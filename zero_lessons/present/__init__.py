"""Presenting the model: the article's table, and one figure spec drawn two ways.

The parts:
- `table`: the per-stage table (text, Markdown, HTML, JSON) and the `fit` table;
- `figures`: the colours, the GPU grid, and `Chart` data made from model values;
- `plots`: `figures` drawn with matplotlib, plus the lessons' own figures;
- `svg`: `figures` drawn as small SVG strings, fast enough for the explorer;
- `html`: HTML for the advice and the traffic table.

Only the table loads here: `plots` pulls in matplotlib, so import it by name (`from zero_lessons.present
import plots`).
"""

from .table import FitTable, StageTable, fit_table, stage_table, table_of

__all__ = ["FitTable", "StageTable", "fit_table", "stage_table", "table_of"]
