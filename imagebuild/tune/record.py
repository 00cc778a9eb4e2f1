"""Record the GEMMs of a run (a profiled step of the validation model, or a command under
the libraries' own recording): the code is ``validate/checks/tune_record.py``, which
images carry; here its errors are TuneErrors."""

from __future__ import annotations

from imagebuild.validate.checks import tune_record
from imagebuild.validate.checks.tune_record import RECORD_ENV

from .problem import host_errors

record_local = host_errors(tune_record.record_local)
record_command = host_errors(tune_record.record_command)

__all__ = ["RECORD_ENV", "record_command", "record_local"]
