"""The Jobs screen at 80×24 over a real sandbox instance: the queue, the live log, and keys."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

from textual.widgets import DataTable, Input, RichLog, Static

from gputui.app import GpuTuiApp
from gputui.providers.base import CreateRequest
from gputui.services.hub import Services
from gputui.services.jobs import JobService, JobSpec
from gputui.ui.jobs import JobsScreen
from tests.ui.waits import on_screen


async def rent(svc: Services):
    offer = await svc.find_offer("sandbox", "RTX 4090")
    req = CreateRequest(offer_id=offer.offer_id, gpu_count=2, name="sweep")
    return await svc.create("sandbox", offer, req)


async def until(pilot, cond: Callable[[], bool], what: str, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"never: {what}")


def cell(table: DataTable, row: str, col: str) -> str:
    return str(table.get_cell(row, col))


def log_text(screen: JobsScreen) -> str:
    log = screen.query_one(RichLog)
    return "\n".join("".join(seg.text for seg in line) for line in log.lines)


async def test_jobs_screen_queue_log_and_keys(services: Services, tmp_path):
    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("echo hello from one; exit 3", name="first"),
                          JobSpec("sleep 60", name="long", gpus=(1,))])
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        table = screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2 and cell(table, "1", "status") == "failed"
                    and cell(table, "2", "status") == "running", "two runs shown")
        assert cell(table, "1", "exit") == "3" and cell(table, "1", "name") == "first"
        assert "$" in cell(table, "1", "cost")
        head = str(screen.query_one("#jobs-head", Static).render())
        assert "sweep" in head and "1 failed" in head
        await until(pilot, lambda: "hello from one" in log_text(screen), "the first run's log")

        # cancel the running one (x, then y to confirm)
        await pilot.press("down")
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("y")
        await until(pilot, lambda: cell(table, "2", "status") == "cancelled", "cancelled")

        # retry the failed one
        await pilot.press("up")
        await pilot.press("r")
        await until(pilot, lambda: table.row_count == 3, "a retry queued")

        # add a run with a form
        # (the command first, focused; the optional fields after it; Enter queues it; the
        # whole form and its keys line inside 80×24)
        await pilot.press("a")
        await until(pilot, lambda: bool(app.screen.query(Input)), "the add form")
        form = app.screen
        assert form.focused is form.query_one("#f-command", Input)
        assert on_screen(form.query_one("#f-retries", Input))
        keys = form.query_one("#form-keys", Static)
        assert on_screen(keys) and "enter: queue it" in str(keys.render())
        form.query_one("#f-gpus", Input).value = "0"
        form.query_one("#f-name", Input).value = "added"
        await pilot.press(*"mkdir -p res && echo 42 > res/a.txt && echo added run", "enter")
        await until(pilot, lambda: table.row_count == 4 and cell(table, "4", "status")
                    == "succeeded", "the added run done")
        assert cell(table, "4", "name") == "added"

        # pull its result home (p)
        await pilot.press("p")
        await until(pilot, lambda: bool(app.screen.query(Input)), "the pull form")
        app.screen.query_one("#f-remote", Input).value = "res"
        app.screen.query_one("#f-local", Input).value = str(tmp_path / "got")
        await pilot.press("enter")
        await until(pilot, lambda: (tmp_path / "got" / "a.txt").exists(), "the result pulled")
        assert (tmp_path / "got" / "a.txt").read_text() == "42\n"

        # when done: release (nothing to pull), set while a run is still queued (on a queue
        # that has already ended it is done at once: tests/services/test_jobs.py)
        await jobs.add(inst, [JobSpec("sleep 120", name="long")])
        await until(pilot, lambda: table.row_count == 5, "the long run listed")
        await pilot.press("w")
        await until(pilot, lambda: bool(app.screen.query(Input)), "the when-done form")
        app.screen.query_one("#f-remote", Input).value = ""  # nothing to pull
        await pilot.press("enter")  # release, as filled in
        await until(pilot, lambda: "release when the queue ends" in
                    str(screen.query_one("#jobs-head", Static).render()), "the policy shown")
        # ...and Home shows it beside the timer
        await pilot.press("h")
        await until(pilot, lambda: app.screen.__class__.__name__ == "HomeScreen", "Home")
        home = app.screen.query_one(DataTable)
        await asyncio.sleep(0)
        assert "at queue end" in str(home.get_cell(inst.id, "release"))


async def test_dialogs_show_where_results_go_and_run_in_the_pushed_project(
        services: Services, tmp_path, monkeypatch):
    """Pull and When-done show the absolute destination before confirming (editable); Queue a
    run has a working folder (the pushed project by default) and retries."""
    from gputui.remote.transfer import push
    from gputui.services.pushes import record_push

    monkeypatch.chdir(tmp_path)
    inst = await rent(services)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    await push(await services.link(inst), project, "~/proj")
    record_push(services, inst.id, "~/proj")
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        screen = app.screen
        table = screen.query_one(DataTable)

        await pilot.press("a")
        await until(pilot, lambda: bool(app.screen.query("#f-cwd")), "the add form")
        form = app.screen
        assert form.query_one("#f-cwd", Input).value == "proj"
        assert form.query_one("#f-retries", Input).value == "0"
        form.query_one("#f-retries", Input).value = "101"
        form.query_one("#f-command", Input).value = "ls train.py && pwd"
        form.query_one("#f-command", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: any("0 to 100" in str(n.message)
                                       for n in app._notifications), "retries refused")
        assert table.row_count == 0

        await pilot.press("a")
        await until(pilot, lambda: bool(app.screen.query("#f-cwd")), "the add form again")
        form = app.screen
        form.query_one("#f-retries", Input).value = "2"
        form.query_one("#f-command", Input).value = "ls train.py && pwd && exit 1"
        form.query_one("#f-command", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: table.row_count >= 1 and all(
            cell(table, k.value, "status") == "failed" for k in table.rows), "the run failed",
            deadline_s=90)
        view = await JobService(services).view(inst)
        first = view.jobs[0]
        assert (first.retries, first.cwd) == (2, "proj"), first.as_dict()
        assert "/proj" in "\n".join(await JobService(services).log_tail(inst, first.id))

        await pilot.press("p")
        await until(pilot, lambda: bool(app.screen.query("#f-local")), "the pull form")
        form = app.screen
        local = form.query_one("#f-local", Input)
        assert local.value == str(tmp_path / "results")  # absolute, before confirming
        local.value = "out/run1"
        await pilot.pause()
        note = str(form.query_one("#n-local", Static).render())
        assert str(tmp_path / "out" / "run1") in note
        await pilot.press("escape")

        await pilot.press("w")
        await until(pilot, lambda: bool(app.screen.query("#f-local")), "the when-done form")
        assert app.screen.query_one("#f-local", Input).value == str(tmp_path / "results")
        assert str(tmp_path / "results") in str(app.screen.query_one("#n-local", Static).render())
        await pilot.press("escape")


async def test_jobs_screen_log_draws_a_progress_bar_as_a_terminal_leaves_it(services: Services):
    """Issue 29.8: the log split a progress bar's `ABC\rred` into two lines; each line is what
    a terminal shows at its end (`ABCDEF\rred` -> `redDEF`)."""
    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec(
        r"printf 'ABC\rred\nABCDEF\rred\n 10%%|#  |\r 50%%|## |\r100%%|###|\nend\n'",
        name="bar")])
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        await until(pilot, lambda: "end" in log_text(screen).splitlines(), "the run's log")
        assert log_text(screen).splitlines() == ["red", "redDEF", "100%|###|", "end"]


async def test_jobs_screen_with_no_instance_says_what_to_do(services: Services):
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        head = str(app.screen.query_one("#jobs-head", Static).render())
        assert "No running instance" in head
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)  # nothing opened, a notice instead


async def test_console_start_pulls_and_releases_a_finished_queue(services: Services, tmp_path):
    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("mkdir -p out && echo ok > out/r.txt", name="only")])
    await jobs.set_when_done(inst, "release", pulls=[("out", str(tmp_path / "out"))])
    await jobs.wait(inst)
    # no gputui is watching; now the console starts, with its clock
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: not services.store.get_instance_sync(inst.id).status.live,
                    "released by the console's clock", deadline_s=90)
    assert (tmp_path / "out" / "r.txt").read_text() == "ok\n"
    assert services.store.get_instance_sync(inst.id).end_reason == "done"


async def test_results_that_never_appear_show_held_on_home_and_jobs(services: Services,
                                                                     tmp_path):
    """The run fails before it writes its results: the console's clock holds the release, and
    Home says "held" (its Queue column) and Jobs "held: results missing (PATH)" — not "at queue
    end" — with the ways out on Jobs."""
    from gputui.ui.home import HomeScreen

    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("while [ ! -e go ]; do sleep 0.2; done; exit 3", name="early")])
    await jobs.set_when_done(inst, "release", pulls=[("results", str(tmp_path / "results"))])
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, HomeScreen), "Home")
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 1, "the instance on Home")
        assert "at queue end" in cell(table, inst.id, "release")
        (services.state_dir / "sandbox" / "instances" / inst.id / "go").touch()  # it fails
        await until(pilot, lambda: cell(table, inst.id, "queue") == "held", "held on Home",
                    deadline_s=90)  # (Home's Queue column; which results: Jobs and the notice)
        assert "queue end" not in cell(table, inst.id, "release")
        assert services.store.get_instance_sync(inst.id).status.live  # kept
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        head = app.screen.query_one("#jobs-head", Static)
        await until(pilot, lambda: "held: results missing (results)" in str(head.render()),
                    "held on Jobs")
        text = str(head.render())
        assert "r on Home releases it anyway" in text and "w here pulls another path" in text
        assert "(pull first)" not in text


async def test_after_a_release_the_jobs_screen_still_shows_the_runs_and_their_logs(
        services: Services):
    """Released while shown (by the daemon, a timer): the rows stay — status, exit code, cost —
    with the last lines of each run's log kept here; a failed run with no output says so."""
    inst = await rent(services)
    jobs = JobService(services)
    await jobs.add(inst, [JobSpec("echo epoch 1; echo epoch 2; echo saved", name="train"),
                          JobSpec("exit 3", name="eval")])
    await jobs.wait(inst)
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        table = screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2, "two runs shown")
        await pilot.press("down")  # the failed run with no output says so while it is live
        await until(pilot, lambda: "no output; exit code 3" in log_text(screen),
                    "no output said (live)")

        await services.release(inst, "idle")  # someone else releases it
        await until(pilot, lambda: "released" in str(
            screen.query_one("#jobs-head", Static).render()), "the head says released")
        head = str(screen.query_one("#jobs-head", Static).render())
        assert "sweep" in head and "1 succeeded" in head and "1 failed" in head
        assert "the last 200 lines of each run's log were kept at the release" in head
        assert table.row_count == 2
        assert cell(table, "1", "status") == "succeeded" and cell(table, "1", "exit") == "0"
        assert cell(table, "2", "status") == "failed" and cell(table, "2", "exit") == "3"
        # each run's cost in dollars (a sub-cent one reads <$0.01; a run that started and
        # ended within one whole second of the runner's clock cost nothing: $0.00)
        for run in ("1", "2"):
            assert re.fullmatch(r"\$\d+\.\d\d|<\$0\.01", cell(table, run, "cost")), cell(table, run, "cost")
        await until(pilot, lambda: "no output; exit code 3" in log_text(screen),
                    "no output said (kept)")
        await pilot.press("up")
        await until(pilot, lambda: log_text(screen) == "epoch 1\nepoch 2\nsaved",
                    "the kept log of run 1")
        await pilot.press("a")  # nothing more can run there: said, not attempted
        await until(pilot, lambda: any("kept here to read" in str(n.message)
                                       for n in app._notifications), "read-only said")

    # and the next morning, in a fresh console
    app = GpuTuiApp(store=services.store, services=services, remember_theme=False,
                    background=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the Jobs screen")
        screen = app.screen
        table = screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2
                    and cell(table, "2", "status") == "failed", "the kept runs")
        await until(pilot, lambda: log_text(screen) == "epoch 1\nepoch 2\nsaved",
                    "the kept log of run 1")
