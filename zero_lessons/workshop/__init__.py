"""The workshop: design questions, a calculator audit and predict-then-measure, each varied by a seed.

`sheet(17)` gives one attendee their sheet and `sheet(17).check(id, answer)` grades an answer against it;
`answer_key(30)` gives the instructor every seed and answer; `grade(folder, key)` reads a folder of
completed notebooks as data, without running them.
"""

from .grade import grade
from .sheets import QUESTIONS, answer_key, check, sheet

__all__ = ["QUESTIONS", "answer_key", "check", "grade", "sheet"]
