"""``validate --launcher sbatch --screen``: the batch job screens its nodes first and runs
the checks on those that pass.

The screen step runs the node screen (imagebuild.inimage.screen) once per node, in the
environment the checks run in; each node writes ``<node>.verdict`` (PASS or FAIL) and its
report beside the validation report, in ``<report>.screen/``, so the script decides in
bash, with no Python on the batch host. A node whose verdict is missing (it hung past
the step's bound, or crashed) counts as failed. The checks' srun then takes the passing
nodes only (``--nodes``, ``--ntasks``, ``--exclude``), the rendezvous host is the first
of them, and IMAGEBUILD_SCREEN_DIR tells the runner where the screen's reports are (the
validation report lists the excluded nodes and why). No node passing ends the job, exit 1.
"""

from __future__ import annotations

#: One screen per node; the GPU probes are one process per GPU, not bound to one core.
SCREEN_SRUN = ("srun", "--ntasks-per-node=1", "--cpus-per-task=1", "--cpu-bind=none",
               "--kill-on-bad-exit=0")
#: The screen step's bound (a node's screen takes about one GPU probe: 15 s at most).
STEP_S = 120
#: What the checks' srun adds: the passing nodes only.
SCREENED_SRUN = ('--nodes="${#passing[@]}"', '--exclude="$exclude"')


def screened_tasks(tasks_per_node: int) -> str:
    return f'--ntasks="$(( ${{#passing[@]}} * {tasks_per_node} ))"'


def screen_lines(command: str, before: list[str] | None = None) -> list[str]:
    """The script's screen step around ``command`` (the srun line, without --out-dir);
    ``before``: comment lines the command needs just above it (a shellcheck directive)."""
    return [
        "",
        "# Screen every node first (locked memory, /dev/shm, GPU errors in the kernel log,",
        "# processes already on a GPU, links, each GPU probed; the doctor's items in an image):",
        "# the checks run on the nodes that pass, the others are excluded, their reasons in",
        "# the screen's reports beside the validation report.",
        'screen_dir="${report%.json}.screen"',
        'mkdir -p "$screen_dir"',
        *(before or []),
        f'timeout -k 10 {STEP_S} {command} --out-dir "$screen_dir" >/dev/null || true',
        "passing=()",
        "failing=()",
        "while read -r node; do",
        '    if [[ $(cat "$screen_dir/$node.verdict" 2>/dev/null) == PASS ]]; then',
        '        passing+=("$node")',
        "    else",
        '        failing+=("$node")',
        "    fi",
        'done < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'exclude=$(IFS=,; echo "${failing[*]}")',
        'echo "$exclude" > "$screen_dir/exclude"',
        "if [[ ${#passing[@]} -eq 0 ]]; then",
        '    echo "imagebuild screen: no node passed; their reasons: $screen_dir" >&2',
        "    exit 1",
        "fi",
        'echo "imagebuild screen: ${#passing[@]} node(s) passed${exclude:+; excluded: $exclude}" >&2',
        "MASTER_ADDR=${passing[0]}",
        'export MASTER_ADDR IMAGEBUILD_SCREEN_DIR="$screen_dir"',
    ]
