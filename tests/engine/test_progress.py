"""The build output parser on output captured from real engines, and the plain display."""

from __future__ import annotations

import io

import pytest

from imagebuild.engine.progress import BuildLogParser, ProgressDisplay, parse_build_output
from tests.engine.conftest import captured


def kinds(events, kind):
    return [e for e in events if e.kind == kind]


def test_buildkit_steps_carry_stage_step_and_instruction():
    events = parse_build_output(captured("buildkit-ok.log"), "buildkit")
    steps = [e for e in kinds(events, "step") if e.stage not in ("internal", None)]
    assert [(e.stage, e.step) for e in steps] == [
        ("builder", "1/4"), ("builder", "2/4"), ("builder", "3/4"), ("builder", "4/4"),
        ("final", "2/3"), ("final", "3/3")]
    assert steps[3].instruction == "COPY payload.txt /payload.txt"
    assert steps[3].label == "builder 4/4: COPY payload.txt /payload.txt"
    assert not kinds(events, "cached") and not kinds(events, "error")


def test_buildkit_rebuild_reports_every_build_step_cached():
    events = parse_build_output(captured("buildkit-cached.log"), "buildkit")
    cached = {(e.stage, e.step) for e in kinds(events, "cached")}
    assert cached == {("builder", "2/4"), ("builder", "3/4"), ("builder", "4/4"),
                      ("final", "2/3"), ("final", "3/3")}


def test_buildkit_output_lines_and_elapsed_time():
    events = parse_build_output(captured("buildkit-timed.log"), "buildkit")
    assert [e.text for e in kinds(events, "output")][:3] == ["tick 1", "tick 2", "tick 3"]
    done = {e.step: e.elapsed for e in kinds(events, "done") if e.step}
    assert done["2/3"] == pytest.approx(3.0)


def test_buildkit_interleaved_parallel_stages_keep_their_own_output():
    parser = BuildLogParser("buildkit")
    events = parser.feed_all(captured("buildkit-parallel.log"))
    by_stage: dict[str, list[str]] = {}
    for event in kinds(events, "output"):
        by_stage.setdefault(event.stage, []).append(event.text)
    assert by_stage == {"left": ["left 1", "left 2", "left 3"],
                        "right": ["right 1", "right 2", "right 3"]}
    # the repeated header when #5 resumes is not a second step, nor output
    assert len([e for e in kinds(events, "step") if e.stage == "left"]) == 1


def test_buildkit_failure_names_the_step_and_keeps_its_tail():
    parser = BuildLogParser("buildkit")
    events = parser.feed_all(captured("buildkit-failing.log"))
    assert len(kinds(events, "error")) == 1
    failure = parser.failure()
    assert failure.step.startswith("broken 1/2: RUN for i in 1 2 3")
    assert failure.tail[-1] == "error: the answer is not 42"
    assert failure.tail[0] == "compile line 7"  # 31 lines printed, the last 25 kept
    assert len(failure.tail) == 25
    assert "exit code: 1" in failure.message


def test_buildkit_failure_before_any_step_uses_the_summary_line():
    parser = BuildLogParser("buildkit")
    parser.feed_all(captured("buildkit-syntax-error.log"))
    failure = parser.failure()
    assert failure.step is None
    assert "unknown instruction: RUNN" in failure.message


def test_buildkit_pull_failure_is_the_metadata_step():
    parser = BuildLogParser("buildkit")
    parser.feed_all(captured("buildkit-registry-refused.log"))
    failure = parser.failure()
    assert failure.step == "[internal] load metadata for 127.0.0.1:5999/nothing/here:1"
    assert "connection refused" in failure.message


def test_podman_steps_are_named_by_their_stage():
    events = parse_build_output(captured("podman-ok.log"), "podman")
    steps = kinds(events, "step")
    assert [(e.stage, e.step) for e in steps][:2] == [("builder", "1/5"), ("builder", "2/5")]
    assert (steps[-1].stage, steps[-1].step) == ("final", "4/4")
    assert steps[-1].instruction.startswith("LABEL ")
    assert len(kinds(events, "done")) == 7 and not kinds(events, "cached")


def test_podman_rebuild_is_cached_and_not_counted_as_built():
    events = parse_build_output(captured("podman-cached.log"), "podman")
    assert len(kinds(events, "cached")) == 7
    assert not kinds(events, "done")


def test_podman_failure_names_the_step_and_keeps_its_tail():
    parser = BuildLogParser("podman")
    parser.feed_all(captured("podman-failing.log"))
    failure = parser.failure()
    assert failure.step.startswith("broken 2/3: RUN for i in")
    assert failure.tail[-1] == "error: the answer is not 42"
    assert len(failure.tail) == 25
    assert failure.message.startswith("building at STEP")


def test_podman_single_stage_steps_have_no_stage():
    parser = BuildLogParser("podman")
    parser.feed_all(captured("podman-registry-refused.log"))
    failure = parser.failure()
    assert failure.step == "1/2: FROM 127.0.0.1:5999/nothing/here:1"
    assert "connection refused" in failure.message


def test_unknown_format_is_rejected():
    with pytest.raises(ValueError):
        BuildLogParser("kaniko")  # type: ignore[arg-type]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_display_prints_one_line_per_step_and_slow_steps():
    stream, clock = io.StringIO(), FakeClock()
    parser = BuildLogParser("buildkit")
    with ProgressDisplay("rocm-7.0.2", stream=stream, live=False, clock=clock) as display:
        for line in captured("buildkit-timed.log"):
            clock.now += 0.5
            for event in parser.feed(line):
                if event.kind == "done" and event.step == "2/3":
                    event = type(event)(**{**event.__dict__, "elapsed": 75.0})
                display(event)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "rocm-7.0.2: started"
    assert any(line.endswith("2/3: RUN for i in 1 2 3; do echo \"tick $i\"; sleep 1; done")
               for line in lines)
    assert any("done in 01:15" in line for line in lines)
    assert not any("internal" in line for line in lines)
    assert lines[-1].startswith("rocm-7.0.2: finished in ")
    assert lines[-1].endswith("(2 steps built, 1 cached)")


def test_live_display_renders_stage_step_and_counts():
    clock = FakeClock()
    display = ProgressDisplay("rocm-7.0.2", stream=io.StringIO(), live=False, clock=clock)
    for event in parse_build_output(captured("buildkit-timed.log"), "buildkit"):
        display(event)
    clock.now = 3725
    text = display.__rich__().plain
    assert text.startswith("rocm-7.0.2 1:02:05")
    assert "3/3: RUN echo done-$(date +%s)" in text
    assert "(2 done, 1 cached)" in text
    assert "done-1795315417" in text  # the current step's last output line


def test_an_early_error_line_is_kept_beside_the_tail():
    lines = ["#6 [broken 1/2] RUN make -j2",
             "#6 0.1 cc -c a.c",
             "#6 0.2 a.c:3:5: error: unknown type name 'flaot'",
             *[f"#6 0.3 cc -c file{i}.c" for i in range(40)],
             "#6 0.4 make: *** [Makefile:4: a.o] Error 1",
             "#6 ERROR: executor failed running [/bin/sh -c make -j2]: exit code: 2"]
    parser = BuildLogParser("buildkit")
    parser.feed_all(lines)
    tail = parser.failure().tail
    assert tail[0] == "a.c:3:5: error: unknown type name 'flaot'"
    assert tail[1] == "[... 17 more lines ...]"
    assert tail[2:] == tuple(f"cc -c file{i}.c" for i in range(16, 40)) + (
        "make: *** [Makefile:4: a.o] Error 1",)


def test_newer_buildx_format():
    # buildx >= 0.10 wording (as quoted in docker/buildx#3756); no machine here has buildx
    lines = [
        '#0 building with "default" instance using docker driver',
        "#3 [1/3] FROM docker.io/library/python:3.11",
        "#3 DONE 0.0s",
        "#4 [2/3] RUN pip install -r requirements.txt",
        ("#4 0.831 ERROR: Could not find a version that satisfies the requirement badpkg==99.0 "
        "(from -r requirements.txt)"),
        ('#4 ERROR: process "/bin/sh -c pip install -r requirements.txt" did not complete '
        "successfully: exit code: 1"),
        "------",
        " > [2/3] RUN pip install -r requirements.txt:",
        "0.831 ERROR: Could not find a version that satisfies the requirement badpkg==99.0",
        "------",
        "Dockerfile:3",
        "--------------------",
        "   3 | >>> RUN pip install -r requirements.txt",
        "--------------------",
        ('ERROR: failed to solve: process "/bin/sh -c pip install -r requirements.txt" did not '
        "complete successfully: exit code: 1"),
    ]
    parser = BuildLogParser("buildkit")
    events = parser.feed_all(lines)
    assert [e.kind for e in events if e.step_id == "4"] == ["step", "output", "error"]
    failure = parser.failure()
    assert failure.step == "2/3: RUN pip install -r requirements.txt"
    assert failure.tail == (("ERROR: Could not find a version that satisfies the requirement "
                            "badpkg==99.0 (from -r requirements.txt)"),)
    assert failure.message.startswith('process "/bin/sh -c pip install')


def test_a_long_instruction_is_one_short_line_in_a_plain_log():
    """Outside a terminal every step is a log line: a thousand-character RUN (the rendered
    Dockerfiles have them) is cut to the first LABEL_WIDTH characters, failure included."""
    run = "RUN set -eux; " + " && ".join(f"step{i} --flag value{i}" for i in range(60))
    stream = io.StringIO()
    parser = BuildLogParser("buildkit")
    lines = [f"#5 [builder 2/4] {run}", "#5 0.201 compiling",
             (f'#5 ERROR: process "/bin/sh -c {run[4:]}" did not complete successfully: '
              "exit code: 2")]
    with pytest.raises(SystemExit), ProgressDisplay("rocm-7.0.2", stream=stream, live=False,
                                                    clock=FakeClock()) as d:
        for line in lines:
            for event in parser.feed(line):
                d(event)
        raise SystemExit(1)
    printed = stream.getvalue().splitlines()
    assert len(run) > 1000
    assert any(line.endswith("builder 2/4: RUN set -eux; step0 --flag value0 && step1 "
                             "--flag value1 && step2 --flag value2 && s...")
               for line in printed)
    failed = [line for line in printed if "FAILED" in line]
    assert failed and failed[0].endswith("...: the command failed (exit code: 2)")
    assert max(len(line) for line in printed) <= 160
