"""What users of kubectl and nomad expect of a command line, checked without a broker."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from pelotonctl.cli import app

runner = CliRunner()


def test_version_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"pelotonctl {version('peloton-kafka')}"


def test_shell_completion_is_offered_for_bash(monkeypatch) -> None:
    # Typer finds the shell among the process's ancestors (the "bash" argument is not read):
    # under a runner with no shell above it (CI, a detached make) it would find none and exit 1.
    monkeypatch.setattr("typer.completion._get_shell_name", lambda: "bash")
    result = runner.invoke(app, ["--show-completion"], prog_name="pelotonctl")
    assert result.exit_code == 0 and "_PELOTONCTL_COMPLETE" in result.stdout, (result.output, result.exception)


def test_a_setting_that_does_not_parse_is_named_by_its_variable(tmp_path) -> None:
    result = runner.invoke(app, ["job", "list"], env={"PELOTON_MAX_BATCH": "lots", "PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 2
    assert "PELOTON_MAX_BATCH='lots': expected a whole number" in result.output


def test_a_bad_host_inventory_is_named_by_its_variable(tmp_path) -> None:
    result = runner.invoke(app, ["dev", "up"], env={"PELOTON_HOSTS": "local:x", "PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "PELOTON_HOSTS: host group 'local:x': count 'x' is not a number" in result.output
    result = runner.invoke(app, ["dev", "up", "--hosts", "gpu:1"], env={"PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "--hosts: host group 'gpu:1'" in result.output


def test_dev_up_and_bench_refuse_an_unknown_store_naming_the_three_they_run_on(tmp_path) -> None:
    for command in (["dev", "up"], ["bench"]):
        result = runner.invoke(app, [*command, "--store", "bogus"], env={"PELOTON_HOME": str(tmp_path)})
        assert result.exit_code == 2, (command, result.output)
        assert "--store: 'bogus' is not sqlite, postgres or cassandra" in result.output, result.output
        helped = runner.invoke(app, [*command, "--help"], terminal_width=200)
        assert all(kind in helped.output for kind in ("sqlite", "postgres", "cassandra")), helped.output
    assert not list(tmp_path.iterdir())  # refused before anything was started or written


def test_help_is_plain_text_and_every_option_has_some() -> None:
    from typer.main import get_command

    result = runner.invoke(app, ["dev", "up", "--help"], terminal_width=200)
    assert "'agent:2:cpu=8;sim:100:cpu=32'" in result.output, result.output  # no emoji made of ':100:'
    assert "<bool>" not in result.output
    missing = []

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        for param in getattr(command, "params", []):
            if getattr(param, "param_type_name", "") == "option" and not param.help and "--help" not in param.opts:
                missing.append(f"{' '.join(path)} {param.opts[0]}")

    walk(get_command(app), [])
    assert not missing, f"options without help: {missing}"


def test_figures_are_rounded_for_people_and_scripts() -> None:
    from pelotonctl.cli.common import amount, rounded

    assert rounded({"cpu": 0.1 + 0.2, "list": [1.0000001, "x"]}) == {"cpu": 0.3, "list": [1.0, "x"]}
    assert [amount(x) for x in (1024000.0, 0.1 + 0.2, 2.5, 8.0)] == ["1024000", "0.3", "2.5", "8"]


def test_a_table_sent_to_a_pipe_keeps_its_full_width(tmp_path) -> None:
    pools = tmp_path / "pools.yaml"
    long = "/" + "a-very-long-pool-name-that-is-copied-from-the-output-" * 2
    pools.write_text(f"capacity: {{cpu: 8}}\npools:\n- path: {long}\n  config:\n    name: long\n    resources:\n"
                     f"    - {{kind: cpu, reservation: 4, limit: 8, share: 1}}\n")
    result = runner.invoke(app, ["respool", "entitlement", "--input", str(pools)], env={"PELOTON_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert long in result.output  # not cut with an ellipsis at 80 columns


def test_pelotons_half_open_ranges_choose_the_same_instances_as_ours() -> None:
    from stages.admit.commands import CommandError, instance_ranges

    assert instance_ranges("0:4", 8) == instance_ranges("0-3", 8) == [0, 1, 2, 3]
    assert instance_ranges(":2,6:", 8) == [0, 1, 6, 7]  # either end left out
    assert instance_ranges(":", 8) == list(range(8))
    assert instance_ranges("0:2,5-6", 8) == [0, 1, 5, 6]  # the two forms mix
    for text, said in (("4:4", "4:4 holds no instance"), ("9:", "the job has instances 0-7"),
                       ("0:20", "the job has instances 0-7"), ("a:b", "is not an instance or a range")):
        try:
            instance_ranges(text, 8)
        except CommandError as exc:
            assert said in str(exc), (text, str(exc))
        else:
            raise AssertionError(f"{text!r} was accepted")


def test_pelotons_rolling_commands_take_the_batch_size_and_ranges_as_pelotons_cli_does() -> None:
    for command in ("rolling-restart", "rolling-start", "rolling-stop"):
        result = runner.invoke(app, ["job", command, "--help"])
        assert result.exit_code == 0 and "BATCH_SIZE" in result.output.upper() and "-r, --range" in result.output
        missing = runner.invoke(app, ["job", command, "some-job"])
        assert missing.exit_code == 2 and "batch_size" in missing.output.lower(), missing.output


def test_pelotons_own_query_lines_run_as_written(tmp_path) -> None:
    import json
    import shlex

    from peloton.store import open_store
    from tests.builders.queries import seed

    store = open_store(tmp_path / "peloton.db")
    seed(store)
    store.close()
    env = {"PELOTON_HOME": str(tmp_path / "home"), "PELOTON_STORE": str(tmp_path / "peloton.db")}
    # The first is the example in Peloton's cmd/cli/main.go (with a pool path: pools are paths here).
    for line, found in (
            ('job query --labels="tier=2,x=y" --respool=/b --keywords=k1,k2 --states=running,killed --limit=1', 0),
            ("job query -l tier=1 -r /a -k nightly,etl -s PENDING -d 36500 -n 10 -q 100 -o 0 -p creation_time "
             "-a DESC", 1),
            ("job query --states PENDING --state SUCCEEDED --label tier=2 --pool /a/x", 1),  # ours, as before
            ("task query etl -s RUNNING,FAILED --names worker,special --hosts h1,h2 -n 5 -o 0 -p state,host -a ASC", 2),
            ("resmgr tasks active --job etl --respool /a --states RUNNING", 1),
            ("resmgr tasks pending /a/x --limit 10", 2)):
        result = runner.invoke(app, [*shlex.split(line), "--json"], env=env)
        assert result.exit_code == 0, (line, result.output)
        assert len(json.loads(result.output)) == found, (line, result.output)


def test_bench_refuses_a_baseline_it_cannot_read_before_starting_anything(tmp_path) -> None:
    (tmp_path / "not-a-bench.json").write_text('{"tasks": 5}')
    for args, said in ((["--targets", "--baseline", str(tmp_path / "missing.json")], "No such file"),
                       (["--targets", "--baseline", str(tmp_path / "not-a-bench.json")],
                        "not the --json of a pelotonctl bench"),
                       (["--baseline", str(tmp_path / "not-a-bench.json")], "--baseline is read by --targets only"),
                       (["--targets", "--rate", "100"], "--targets runs its own steady load"),
                       (["--warmup", "30"], "--warmup 30: must be 0 or more, and needs --rate"),
                       (["--against", "2c424af"], "--against is read by --targets only"),
                       (["--targets", "--against", "2c424af", "--baseline", str(tmp_path / "not-a-bench.json")],
                        "one measure of the CPU target"),
                       (["--targets", "--against", "2c424af", "--pairs", "0"], "--pairs 0: must be at least 1"),
                       (["--cpu-per-instance", "-0.5"], "give a share of a core above 0"),
                       (["--targets", "--cpu-per-instance", "0.1"], "--targets runs its own capped runs"),
                       # no such commit, or (a checkout without git) no clone to find it in
                       (["--targets", "--against", "no-such-revision"], "--against no-such-revision: ")):
        result = runner.invoke(app, ["bench", *args], env={"PELOTON_HOME": str(tmp_path / "home")})
        assert result.exit_code == 2 and said in result.output, (args, result.output)
    assert not (tmp_path / "home").exists()
