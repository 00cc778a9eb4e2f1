"""``imagebuild validate [TARGET]``: prove an image (or this environment) correct and fast.

No target: validate the environment this runs in (how it runs inside an image on a
cluster). A recipe name or image reference: run the checks inside that image through a
launcher. Exit codes: 0 all checks passed, 1 a check failed or required GPU checks were
skipped (see --allow-cpu), 2 the suite could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.doctor.before_checks import DOCTOR_DONE_ENV
from imagebuild.inimage.gpu_data import UsageError, load_gpu_data, validate_thresholds
from imagebuild.inimage.history import append_history, history_record
from imagebuild.inimage.options import add_arguments
from imagebuild.recipe.load import project_dir
from imagebuild.recipe.site import SiteProfile, default_site, load_site
from imagebuild.validate.history_input import history_for_run
from imagebuild.validate.host import GPU_KINDS, LAUNCHERS, choose_launcher, validate
from imagebuild.validate.input_binds import host_path_binds
from imagebuild.validate.invocation import (
    CONTAINER_LAUNCHERS,
    Invocation,
    iter_runner_flags,
    passthrough_env,
    prepare_inputs,
    runs_in_container,
    staged_checks,
)
from imagebuild.validate.launch_sbatch import GPU_SELECTIONS, SbatchSpec
from imagebuild.validate.references_input import references_for_run
from imagebuild.validate.site_defaults import SiteDefaults, expand_refs, present_binds, resolve
from imagebuild.validate.target import Target, detect_gpu_kind, resolve_target

#: Host-only flags: never forwarded to the in-image runner.
_HOST_DESTS = {"target", "local", "launcher", "gpus", "mount_checks", "python", "nodes",
               "gpus_per_node", "time", "partition", "account", "environment", "edf", "report",
               "thresholds", "func", "command", "project", "ntasks_per_node",
               "cpus_per_task", "cpu_bind", "gpu_select", "socket_ifname", "site",
               "distribution", "exclusive",
               "bind_host_rocm", "tuning", "doctor", "references", "history", "screen",
               "screen_args"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate", help="run the GPU validation suite (here, or in a built image)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", default=None,
                        help="recipe name, image reference, .sif or .sqsh file "
                             "(default: this environment)")
    parser.add_argument("--local", action="store_true",
                        help="run in this Python environment (the default without a target)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="auto",
                        help="how to run the checks in the image (default: docker if its "
                             "engine answers, else podman; apptainer for .sif, enroot for .sqsh)")
    parser.add_argument("--site", default=default_site(),
                        help="site profile (imagebuild/data/sites or ./sites): its container "
                             "binds and environment, SLURM binding, socket interfaces and the "
                             "libfabric provider the network check expects; explicit flags win "
                             "(default $IMAGEBUILD_SITE)")
    parser.add_argument("--gpus", choices=GPU_KINDS, default="auto",
                        help="GPUs to pass into the container (default: detected from /dev)")
    parser.add_argument("--mount-checks", action="store_true",
                        help="bind-mount this imagebuild's checks into the image instead of "
                             "running the copy baked into it")
    parser.add_argument("--python", default=None,
                        help="Python interpreter inside the image (default python3; this "
                             "interpreter for --launcher sbatch without an image)")
    parser.add_argument("--bind-host-rocm", action=argparse.BooleanOptionalAction, default=None,
                        help="apptainer: bind the host's ROCm libraries over the image's "
                             "(--rocm; default: the site's apptainer.bind_host_rocm, else no)")
    parser.add_argument("--report", default=None, metavar="PATH",
                        help="JSON report path (default ./reports/validate-<host>-<time>.json)")
    parser.add_argument("--screen", action="store_true",
                        help="screen the nodes first (imagebuild screen's node part): with "
                             "--launcher sbatch the job runs the checks on the nodes that pass "
                             "and excludes the others; on this node a failing screen stops the "
                             "run")
    parser.add_argument("--screen-args", default="", metavar="FLAGS",
                        help="flags for the node screen, e.g. '--memlock-min-gib 64 "
                             "--kernel-log-minutes 60'")
    batch = parser.add_argument_group("sbatch launcher (defaults: the site profile's slurm)")
    batch.add_argument("--nodes", type=int, default=2, help="nodes (default 2)")
    batch.add_argument("--gpus-per-node", type=int, default=None,
                       help="ranks and GPUs per node (default 8; 4 on MI300A nodes)")
    batch.add_argument("--time", default="00:30:00", help="wall time (default 00:30:00)")
    batch.add_argument("--partition", default=None,
                       help="SLURM partition of the job (#SBATCH --partition)")
    batch.add_argument("--account", default=None,
                       help="SLURM account charged for the job (#SBATCH --account)")
    batch.add_argument("--environment", default=None,
                       help="Container Engine environment (EDF name or path) for srun")
    batch.add_argument("--edf", default=None,
                       help="Sarus Suite EDF (name or path, e.g. artifacts/<recipe>.sarus.toml "
                            "from build --push --site) for Skybox's srun --edf")
    batch.add_argument("--ntasks-per-node", type=int, default=None,
                       help="ranks per node (default: --gpus-per-node; 2 with --gpus none)")
    batch.add_argument("--cpus-per-task", type=int, default=None,
                       help="cores per rank (default 7; 1 with --gpus none)")
    batch.add_argument("--cpu-bind", default=None,
                       help="srun --cpu-bind: cores (default), or mask_cpu:M0,M1,... with one "
                            "mask per local rank, as for LUMI-G: "
                            "https://docs.lumi-supercomputer.eu/runjobs/scheduled-jobs/lumig-job/")
    batch.add_argument("--distribution", default=None, metavar="NODES:SOCKETS",
                       help="srun --distribution (default: the site's slurm.distribution, else "
                            "block:block when binding by cores, so consecutive ranks share a "
                            "socket as their GPUs usually do)")
    batch.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=None,
                       help="#SBATCH --exclusive: whole nodes, where CPU binding is valid on "
                            "shared partitions (default: the site's slurm.exclusive, else no)")
    batch.add_argument("--gpu-select", choices=GPU_SELECTIONS, default=None,
                       help="local-id (default): each rank sees GPU SLURM_LOCALID through "
                            "ROCR/CUDA_VISIBLE_DEVICES; closest: --gpus-per-task=1 "
                            "--gpu-bind=closest")
    batch.add_argument("--socket-ifname", default=None, metavar="IF[,IF...]",
                       help="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (default: the site "
                            "profile's network.socket_ifname; lo for a one-node test)")
    add_arguments(parser, output=False)
    parser.set_defaults(func=run)


def load_thresholds(path: str | None) -> dict[str, Any] | None:
    """A thresholds file in YAML or JSON, checked against the GPU table's names."""
    if not path:
        return None
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ValidateError(f"{file}: cannot read thresholds ({exc.strerror})") from exc
    try:
        if file.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError both land here
        raise ValidateError(f"{file}: not valid {file.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
    except Exception as exc:
        raise ValidateError(f"{file}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValidateError(f"{file}: expected a mapping of thresholds")
    try:
        validate_thresholds(data, load_gpu_data(), str(file))
    except UsageError as exc:
        raise ValidateError(str(exc)) from exc
    return data


def _runner_actions() -> list[Any]:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser, output=False)
    return [a for a in parser._actions if a.dest not in _HOST_DESTS]


def site_defaults(args: argparse.Namespace, recipe: str | None = None) -> SiteDefaults:
    """Launch values from the flags, the site profile (--site) and the built-in defaults;
    with the target's ``recipe``, the site's network variables fitted to what its image
    carries (no NCCL_NET the image cannot load)."""
    site: SiteProfile | None = load_site(args.site, project_dir()) if args.site else None
    network = None
    if site is not None and recipe is not None:
        from imagebuild.recipe.load import load_recipe
        from imagebuild.render.plan import plan_for

        network = plan_for(load_recipe(recipe, project_dir()), None,
                           project_dir()).image_network
    return resolve(vars(args), site, network)


def sbatch_spec(args: argparse.Namespace, defaults: SiteDefaults | None = None) -> SbatchSpec:
    """The batch job from the flags and the site profile."""
    defaults = defaults or site_defaults(args)
    return SbatchSpec(nodes=args.nodes, gpus_per_node=defaults.gpus_per_node.value,
                      ntasks_per_node=args.ntasks_per_node,
                      cpus_per_task=defaults.cpus_per_task.value,
                      cpu_bind=defaults.cpu_bind.value, gpu_select=defaults.gpu_select.value,
                      distribution=defaults.distribution.value,
                      exclusive=bool(defaults.exclusive.value),
                      socket_ifname=defaults.socket_ifname.value,
                      site_env=tuple(sorted(defaults.env.items())), time=args.time,
                      partition=args.partition, account=args.account,
                      environment=args.environment, edf=getattr(args, "edf", None),
                      report_path=str(Path(args.report).resolve()) if args.report else None,
                      mount_checks=args.mount_checks, doctor=getattr(args, "doctor", True),
                      screen=bool(getattr(args, "screen", False)),
                      single_node_srun=defaults.single_node_srun,
                      screen_args=tuple(shlex.split(getattr(args, "screen_args", "") or "")))


def runner_values(args: argparse.Namespace, defaults: SiteDefaults, launcher: str
                  ) -> dict[str, Any]:
    """The in-image runner's option values: the flags, with the site's expectations filled
    in (the provider the network check expects, the binding the affinity check expects)."""
    values = dict(vars(args))
    values["expect_net_provider"] = defaults.expect_net_provider.value
    values["expect_binding"] = bool(args.expect_binding) or defaults.expect_binding(launcher)
    values["system"] = args.system or defaults.site
    return values


def container_env(defaults: SiteDefaults, launcher: str, target: Target,
                  environ: dict[str, str]) -> dict[str, str]:
    """The environment the checks get: the site's (references expanded where no shell or
    Container Engine will), then what this environment passes through, which wins."""
    if launcher == "sbatch":  # the script exports the site's environment itself
        return passthrough_env(environ) if target.kind != "environment" else {}
    site = {key: expand_refs(value, environ) for key, value in defaults.env.items()}
    if defaults.socket_ifname.value:
        site["NCCL_SOCKET_IFNAME"] = site["GLOO_SOCKET_IFNAME"] = defaults.socket_ifname.value
    if launcher == "local":
        return site  # the local launcher puts this process's environment over it
    return {**site, **passthrough_env(environ)}


def doctor_handled(args: argparse.Namespace, launcher: str, target: Target) -> dict[str, str]:
    """Tell the in-image runner not to run the doctor again where it ran here, is the
    sbatch script's per-node step, or was declined (--no-doctor). A job in a plain Python
    environment has no such step: its runner runs it on each node."""
    if args.doctor and launcher == "sbatch" and target.kind == "environment":
        return {}
    return {DOCTOR_DONE_ENV: "1"}


def run_doctor_first(args: argparse.Namespace, target: Target, gpus: str, launcher: str,
                     defaults: SiteDefaults) -> bool:
    """The doctor's preflight; False (after printing why) when an item failed."""
    from rich.console import Console

    from imagebuild.commands.doctor import print_findings
    from imagebuild.doctor.preflight import preflight
    from imagebuild.inimage.doctor.finding import exit_code

    err = Console(stderr=True)
    site = load_site(args.site, project_dir()) if args.site else None
    result = preflight(target.kind, target.recipe, target.ref, site, dict(os.environ),
                       gpus=gpus, launcher=launcher, cpu=bool(args.cpu),
                       bind_host_rocm=bool(defaults.bind_host_rocm.value), project=project_dir())
    if result.skipped:
        err.print(f"doctor: not run ({result.skipped})", highlight=False, soft_wrap=True)
        return True
    assert result.needs is not None
    err.print(f"doctor: {result.needs.name} on this node", highlight=False, soft_wrap=True)
    print_findings(err, list(result.findings))
    if exit_code(list(result.findings)):
        err.print("validate stopped before the GPU checks: this node does not fit the image "
                  "(fix the failed items, or --no-doctor to run the checks anyway)",
                  highlight=False, soft_wrap=True)
        return False
    return True


def screen_first(args: argparse.Namespace, launcher: str) -> bool:
    """This node's screen before the checks run here; False (after its lines) when it
    fails. Only where the checks run in this environment: a container's screen is
    ``imagebuild screen`` with the image, and a batch job screens its own nodes."""
    import subprocess

    if launcher != "local":
        raise ValidateError(f"--screen with --launcher {launcher}: the screen runs with "
                            "--launcher sbatch (on the job's nodes) or local (this node)",
                            hint="run imagebuild screen X.sif (or --environment EDF) first")
    command = [sys.executable, "-m", "imagebuild.inimage", "screen",
               *shlex.split(args.screen_args or ""), *(["--cpu"] if args.cpu else [])]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        print("validate stopped before the checks: this node failed its screen (fix the "
              "failed items, or run without --screen)", file=sys.stderr)
        return False
    return True


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from imagebuild.tune.launch import tuning_launch
    from imagebuild.validate.display import CheckProgress, print_results

    if args.local and args.target:
        raise ValidateError(f"--local validates this environment; drop the target {args.target!r} "
                            "or drop --local")
    target = resolve_target(None if args.local else args.target)
    if args.local and args.launcher not in ("auto", "local", "sbatch"):
        raise ValidateError(f"--local validates this Python environment, which --launcher "
                            f"{args.launcher} cannot run; drop one of them (--launcher sbatch "
                            "runs this environment on a SLURM cluster)")
    requested = "local" if args.local and args.launcher == "auto" else args.launcher
    launcher = choose_launcher(target, requested, shutil.which)
    container = runs_in_container(launcher, target)
    # before anything runs, and before the runner flags are made: they carry resolved paths
    inputs = host_path_binds(args, container)
    gpus = "none" if args.cpu else (detect_gpu_kind() if args.gpus == "auto" else args.gpus)
    if launcher == "sbatch" and not args.cpu and args.gpus == "auto" and gpus == "none":
        # The job runs on compute nodes, not here: a login node without GPUs says nothing.
        gpus = "rocm"
    defaults = site_defaults(args, target.recipe)
    engine = None  # opened here for an image, and the run uses the same one
    if target.ref and launcher in ("docker", "podman"):
        from imagebuild.commands.engine_choice import open_engine_saying

        # auto: the engine auto picks, saying so when it passes Docker over
        engine = open_engine_saying("auto" if requested == "auto" else launcher,
                                    for_build=False)
        launcher = engine.backend
        if target.recipe and engine.image_exists(target.ref):  # a missing one is named
            from imagebuild.build.current import check_current  # when it would run
            from imagebuild.recipe.load import load_recipe

            check_current(engine, load_recipe(target.recipe, project_dir()), target.ref)
    if args.screen and launcher != "sbatch" and not screen_first(args, launcher):
        return 1
    if args.doctor and not run_doctor_first(args, target, gpus, launcher, defaults):
        return 1
    thresholds = load_thresholds(args.thresholds)
    site = load_site(args.site, project_dir()) if args.site else None
    references = references_for_run(args.references, site, project_dir())
    history = history_for_run(args.history, site, os.environ)
    runner_args = iter_runner_flags(runner_values(args, defaults, launcher), _runner_actions())
    # validate/ takes the bundle as plain flags, binds and environment; tune/ makes them.
    tuning = tuning_launch(Path(args.tuning), target.recipe, container) if args.tuning else None
    runner_args += list(tuning.runner_args) if tuning else []
    if launcher == "sbatch":
        inputs_dir = None
        if args.thresholds:
            if Path(args.thresholds).suffix != ".json":
                raise ValidateError("--launcher sbatch: the in-image runner reads JSON "
                                    "thresholds; give a .json file")
            runner_args += ["--thresholds", str(Path(args.thresholds).resolve())]
        if references:
            if references[1].suffix != ".json":
                raise ValidateError(f"--launcher sbatch: the in-image runner reads JSON "
                                    f"references; {references[1]} is not a .json file",
                                    hint="convert it and pass --references FILE.json")
            runner_args += ["--references", str(references[1].resolve())]
        if history:  # the job appends on the cluster's shared file system
            runner_args += ["--history", str(history.resolve())]
    else:
        inputs_dir, extra = prepare_inputs(thresholds, container,
                                           references[0] if references else None)
        runner_args += extra
    out = Console()
    err = Console(stderr=True)
    binds = defaults.binds
    if launcher in CONTAINER_LAUNCHERS:
        binds, skipped = present_binds(binds, dict(os.environ))
        for line in skipped:
            err.print(f"[yellow]{line}[/yellow]", soft_wrap=True)
    if defaults.site:
        err.print(f"site {defaults.site}: " + (", ".join(defaults.described()) or "no launch "
                                                "values"), soft_wrap=True)
    invocation = Invocation(
        launcher=launcher, runner_args=tuple(runner_args), gpus=gpus, inputs_dir=inputs_dir,
        # sbatch stages its own copy beside the script, where the compute nodes see it.
        mount_checks=staged_checks() if args.mount_checks and container
        and launcher != "sbatch" else None,
        python=args.python or ("python3" if container else sys.executable),
        env={**container_env(defaults, launcher, target, dict(os.environ)),
             **(tuning.env if tuning else {}), **doctor_handled(args, launcher, target)},
        bind_host_rocm=bool(defaults.bind_host_rocm.value),
        binds=(*(binds if launcher != "local" else ()), *(tuning.binds if tuning else ()),
               *inputs),
        library_dir=defaults.library_dir)
    spec = sbatch_spec(args, defaults) if launcher == "sbatch" else None
    report_path = Path(args.report) if args.report else None
    try:
        if launcher == "sbatch":
            outcome = validate(target, invocation, report_path=None, sbatch=spec)
            out.print(f"wrote {outcome.script_path}; submit it with: sbatch {outcome.script_path}",
                      soft_wrap=True)
            return 0
        with CheckProgress(err) as progress:
            outcome = validate(target, invocation, report_path=report_path,
                               on_event=progress.on_event, on_line=progress.on_line,
                               engine=engine)
    finally:
        if inputs_dir is not None:
            shutil.rmtree(inputs_dir, ignore_errors=True)
        if invocation.mount_checks is not None:
            shutil.rmtree(invocation.mount_checks, ignore_errors=True)
    assert outcome.report is not None  # only an sbatch run (returned above) has none
    print_results(out, outcome.report)
    out.print(f"report: {outcome.report_path}")
    if history:
        try:
            written = append_history(history, history_record(outcome.report, None))
        except OSError as exc:
            raise ValidateError(f"{history}: cannot append to the history "
                                f"({exc.strerror})", hint="--history names a file this user "
                                "can write") from exc
        out.print(f"history: {written}")
    return outcome.exit_code
