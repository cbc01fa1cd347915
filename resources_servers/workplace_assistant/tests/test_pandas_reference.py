# ruff: noqa: E501
"""Differential check against a pandas re-statement of WorkBench's write tools and scorer.

WorkBench ran on pandas 2 (``DataFrame.equals``, ``.loc`` enlargement, ``pd.concat`` labels); this test re-states
those semantics with pandas itself and fuzzes random write sequences, asserting the engine gives the same
verdict. It needs pandas 2.x and WorkBench's data. The shared venv has pandas 3, so the test runs this file in a
venv with pandas 2.1.4 of its own (``~/.cache/ngym/pandas-2.1.4-venv``, made when CI=true and reused after).
By hand: ``PYTHONPATH=resources_servers:. <pandas-2 python> .../test_pandas_reference.py``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from ngym.config import cache_root

try:
    import pytest
except ImportError:  # running as a script
    pytest = None

WORKBENCH = Path(os.environ.get("NGYM_WORKBENCH_DIR") or Path(__file__).resolve().parents[4] / "shared" / "workbench")


class Reference:
    """WorkBench's write tools and scorer, stated with pandas (module globals → attributes)."""

    def __init__(self, root: Path) -> None:
        import pandas as pd

        self.pd, self.root = pd, root / "processed"

    def reset(self) -> None:
        pd = self.pd
        self.cal = pd.read_csv(self.root / "calendar_events.csv", dtype=str)
        self.em = pd.read_csv(self.root / "emails.csv", dtype=str)
        self.pm = pd.read_csv(self.root / "project_tasks.csv", dtype=str)
        self.crm = pd.read_csv(self.root / "customer_relationship_manager_data.csv", dtype=str)
        self.plots = pd.DataFrame(columns=["file_path"])

    def send_email(self, recipient=None, subject=None, body=None):
        if not recipient or not subject or not body or "@" not in recipient or "." not in recipient:
            return "no"
        self.em.loc[len(self.em)] = [str(int(self.em["email_id"].max()) + 1), "outbox", recipient.lower(), subject,
                                     self.pd.Timestamp("2023-11-30T00:00:00"), body]  # fmt: skip
        return "Email sent successfully."

    def delete_email(self, email_id=None):
        if email_id and email_id in self.em["email_id"].values:
            self.em = self.em[self.em["email_id"] != email_id]

    def forward_email(self, email_id=None, recipient=None):
        if not email_id or not recipient or email_id not in self.em["email_id"].values:
            return
        if "@" not in recipient or "." not in recipient:
            return
        e = self.em[self.em["email_id"] == email_id].to_dict(orient="records")[0]
        self.send_email(recipient.lower(), f"FW: {e['subject']}", e["body"])

    def reply_email(self, email_id=None, body=None):
        if not email_id or not body or email_id not in self.em["email_id"].values:
            return
        e = self.em[self.em["email_id"] == email_id].to_dict(orient="records")[0]
        self.send_email(e["sender/recipient"], f"{e['subject']}", body)

    def create_event(self, event_name=None, participant_email=None, event_start=None, duration=None):
        if not event_name or not participant_email or not event_start or not duration:
            return
        new = self.pd.DataFrame({"event_id": [str(int(self.cal["event_id"].max()) + 1).zfill(8)],
                                 "event_name": [event_name], "participant_email": [participant_email.lower()],
                                 "event_start": [event_start], "duration": [duration]})  # fmt: skip
        self.cal = self.pd.concat([self.cal, new])

    def delete_event(self, event_id=None):
        if event_id and event_id in self.cal["event_id"].values:
            self.cal = self.cal[self.cal["event_id"] != event_id]

    def update_event(self, event_id=None, field=None, new_value=None):
        if not event_id or not field or not new_value or event_id not in self.cal["event_id"].values:
            return
        self.cal.loc[self.cal["event_id"] == event_id, field] = (
            new_value.lower() if field == "participant_email" else new_value
        )

    def create_plot(self, time_min=None, time_max=None, value_to_plot=None, plot_type=None):
        ok_values = ["total_visits", "session_duration_seconds", "user_engaged", "visits_direct", "visits_referral",
                     "visits_search_engine", "visits_social_media"]  # fmt: skip
        if (
            time_min
            and time_max
            and value_to_plot in ok_values
            and plot_type in ["bar", "line", "scatter", "histogram"]
        ):
            self.plots.loc[len(self.plots)] = [f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"]

    def create_task(self, task_name=None, assigned_to_email=None, list_name=None, due_date=None, board=None):
        if not all([task_name, assigned_to_email, list_name, due_date, board]):
            return
        a = assigned_to_email.lower()
        if a not in self.pm["assigned_to_email"].str.lower().values:
            return
        if list_name not in ["Backlog", "In Progress", "In Review", "Completed"] or board not in [
            "Back end", "Front end", "Design"]:  # fmt: skip
            return
        new = self.pd.DataFrame({"task_id": [str(int(self.pm["task_id"].max()) + 1).zfill(8)], "task_name": [task_name],
                                 "assigned_to_email": [a], "list_name": [list_name], "due_date": [due_date],
                                 "board": [board]})  # fmt: skip
        self.pm = self.pd.concat([self.pm, new], ignore_index=True)

    def delete_task(self, task_id=None):
        if task_id and task_id in self.pm["task_id"].values:
            self.pm = self.pm[self.pm["task_id"] != task_id]

    def update_task(self, task_id=None, field=None, new_value=None):
        if not task_id or not field or not new_value:
            return
        if field == "assigned_to_email":
            new_value = new_value.lower()
            if new_value not in self.pm["assigned_to_email"].str.lower().values:
                return
        if field == "board" and new_value not in ["Back end", "Front end", "Design"]:
            return
        if field == "list_name" and new_value not in ["Backlog", "In Progress", "In Review", "Completed"]:
            return
        if task_id in self.pm["task_id"].values and field in self.pm.columns:
            self.pm.loc[self.pm["task_id"] == task_id, field] = new_value

    def update_customer(self, customer_id=None, field=None, new_value=None):
        if not customer_id or not field or not new_value:
            return
        if field == "status" and new_value not in ["Qualified", "Won", "Lost", "Lead", "Proposal"]:
            return
        if field == "product_interest" and new_value not in ["Software", "Hardware", "Services", "Consulting",
                                                              "Training"]:  # fmt: skip
            return
        if field in ("customer_email", "assigned_to_email"):
            new_value = new_value.lower()
        if customer_id in self.crm["customer_id"].values and field in self.crm.columns:
            self.crm.loc[self.crm["customer_id"] == customer_id, field] = new_value

    def add_customer(self, customer_name=None, assigned_to_email=None, status=None, customer_email=None,
                     customer_phone=None, last_contact_date=None, product_interest=None, notes="", follow_up_by=None):  # fmt: skip
        if not all([customer_name, assigned_to_email, status]):
            return
        new = self.pd.DataFrame({"customer_id": [str(int(self.crm["customer_id"].max()) + 1).zfill(8)],
                                 "customer_name": [customer_name],
                                 "customer_email": [customer_email.lower() if customer_email else customer_email],
                                 "customer_phone": [customer_phone], "last_contact_date": [last_contact_date],
                                 "product_interest": [product_interest], "status": [status],
                                 "assigned_to_email": [assigned_to_email.lower()], "notes": [notes],
                                 "follow_up_by": [follow_up_by]})  # fmt: skip
        self.crm = self.pd.concat([self.crm, new], ignore_index=True)

    def delete_customer(self, customer_id=None):
        if customer_id and customer_id in self.crm["customer_id"].values:
            self.crm = self.crm[self.crm["customer_id"] != customer_id]

    def run(self, actions: list[str]) -> list:
        self.reset()
        f = lambda m: SimpleNamespace(func=m)  # noqa: E731
        scope = {
            "email": SimpleNamespace(**{n: f(getattr(self, n)) for n in
                                        ("send_email", "delete_email", "forward_email", "reply_email")}),
            "calendar": SimpleNamespace(**{n: f(getattr(self, n)) for n in
                                           ("create_event", "delete_event", "update_event")}),
            "analytics": SimpleNamespace(create_plot=f(self.create_plot)),
            "project_management": SimpleNamespace(**{n: f(getattr(self, n)) for n in
                                                     ("create_task", "delete_task", "update_task")}),
            "customer_relationship_manager": SimpleNamespace(**{n: f(getattr(self, n)) for n in
                                                                ("update_customer", "add_customer", "delete_customer")}),
        }  # fmt: skip
        for action in actions:
            try:
                # WorkBench's calculate_metrics turns every line break into \n before it evaluates an action
                eval(action.replace("\n", "\\n"), scope)  # noqa: S307 - test-only reference of WorkBench's replay
            except Exception:  # noqa: BLE001, S112
                continue
        states = [self.cal.copy(), self.em.copy(), self.plots.copy(), self.pm.copy(), self.crm.copy()]
        for df in states:
            for col in df.columns:
                if col not in ("status", "list_name", "board"):
                    df[col] = df[col].str.lower()
        return states

    def is_correct(self, pred: list[str], gold: list[str]) -> bool:
        return all(a.equals(b) for a, b in zip(self.run(pred), self.run(gold), strict=True))


#: Values as a model writes them, rendered into call strings the way WorkBench's runner does (f'{k}="{v}"'):
#: line breaks, escapes, quotes that end the literal early, backslashes, non-ASCII.
TEXTS = ["b", "B", "line\none", "Hi,\n\nBye", "esc\\nape", "it's", 'say "hi"', "tab\there", "back\\slash",
         "trail\\", "ünï € 東京", "caf\\u00e9", "cr\rlf", 'a" "b', 'a" + "b', "x\\x4", "\\N{BULLET}", "crlf\r\n"]  # fmt: skip


def random_action(rng: random.Random) -> str:
    pick = rng.choice
    text = pick(TEXTS)
    eid = pick(["00000479", "00000013", "00000001", "00000499", "500", "501", "00000999"])
    evid = pick(["00000013", "00000275", "00000299", "00000300", "00000301", "nope"])
    tid = pick(["00000149", "00000037", "00000299", "00000300", "00000301"])
    cid = pick(["00000189", "00000107", "00000199", "00000200", "00000201"])
    person = pick(["Luis.Ortiz@atlas.com", "fatima.khan@atlas.com", "x@y.io", "bad", ""])
    value = pick(["New Name", "new name", "Backlog", "backlog", "In Progress", "Front end", "front end", "Won", "won",
                  "Software", "2023-12-01 10:00:00", "30", "sofia.santos@atlas.com", "Sofia.Santos@atlas.com"])  # fmt: skip
    options = [
        f'email.send_email.func(recipient="{person}", subject="{pick(["Hi", "hi", text])}", body="{pick(["b", text])}")',
        f'email.delete_email.func(email_id="{eid}")',
        f'email.forward_email.func(email_id="{eid}", recipient="{person}")',
        f'email.reply_email.func(email_id="{eid}", body="{pick(["ok", "OK", text])}")',
        f'email.delete_email.func("{eid}")',  # positional
        f"email.delete_email.func(email_id={int(eid)})",  # a number, not a string
        f'calendar.create_event.func(event_name="{pick(["Sync", "sync", text])}", participant_email="{person}", '
        f'event_start="2023-12-0{rng.randint(1, 2)} 10:00:00", duration="{pick(["30", "60"])}")',
        f'calendar.delete_event.func(event_id="{evid}")',
        f'calendar.update_event.func(event_id="{evid}", field="{pick(["event_name", "participant_email", "duration", "status", "bogus"])}", new_value="{value}")',  # noqa: E501
        f'analytics.create_plot.func(time_min="2023-11-01", time_max="{pick(["2023-11-29", "2023-11-30"])}", '
        f'value_to_plot="{pick(["total_visits", "user_engaged", "visits"])}", plot_type="{pick(["bar", "line", "pie"])}")',  # noqa: E501
        f'project_management.create_task.func(task_name="T", assigned_to_email="{person}", '
        f'list_name="{pick(["Backlog", "backlog"])}", due_date="2023-12-01", board="{pick(["Back end", "back end"])}")',
        f'project_management.delete_task.func(task_id="{tid}")',
        f'project_management.update_task.func(task_id="{tid}", field="{pick(["list_name", "board", "assigned_to_email", "task_name", "bogus"])}", new_value="{value}")',  # noqa: E501
        f'customer_relationship_manager.update_customer.func(customer_id="{cid}", field="{pick(["status", "product_interest", "assigned_to_email", "notes", "bogus"])}", new_value="{value}")',  # noqa: E501
        f'customer_relationship_manager.add_customer.func(customer_name="{pick(["Zed", "zed"])}", '
        f'assigned_to_email="{person}", status="{pick(["Lead", "lead", ""])}")',
        f'customer_relationship_manager.delete_customer.func(customer_id="{cid}")',
        'email.send_email.func(recipient="a@b.io", subject="x", body="line\none")',  # WorkBench: a newline in body
        'email.send_email.func(recipient="a@b.io",\nsubject="x", body="y")',  # WorkBench: "\\n" outside a literal
        'company_directory.find_email_address.func(name="luis")',
    ]
    return pick(options)


def fuzz(n: int, seed: int = 0) -> tuple[int, list]:
    from workplace_assistant.scoring import score
    from workplace_assistant.workspace import WorkBenchData

    rng = random.Random(seed)
    data, ref = WorkBenchData.from_dir(WORKBENCH), Reference(WORKBENCH)
    mismatches, agree_true = [], 0
    for _ in range(n):
        gold = [random_action(rng) for _ in range(rng.randint(0, 4))]
        mode = rng.random()
        if mode < 0.2:
            pred = list(gold)
        elif mode < 0.4:
            pred = [random_action(rng) for _ in range(rng.randint(0, 4))]
        elif mode < 0.6:
            pred = rng.sample(gold, len(gold))
        elif mode < 0.8:
            pred = [a.replace('"', '"', 1) if rng.random() < 0.5 else a.lower() for a in gold]
        else:
            pred = gold + [random_action(rng)] if rng.random() < 0.5 else gold[:-1]
        expected = ref.is_correct(pred, gold)
        verdict = score(data, pred, gold)
        # The states must compare as WorkBench compares them. The reward may only differ from WorkBench's where
        # the random ground truth cannot be replayed (a call raises or is refused): ngym then answers 0.0 and
        # masks the sample instead of matching "nothing happened".
        got = not verdict.differing_tables
        if verdict.reward != (1.0 if got else 0.0) and not verdict.ground_truth_problems:
            mismatches.append((pred, gold, "reward without a ground-truth problem", verdict))
        agree_true += expected
        if expected != got:
            mismatches.append((pred, gold, expected, got))
    return agree_true, mismatches


def _pandas2() -> bool:
    try:
        import pandas
    except ImportError:
        return False
    return pandas.__version__.startswith("2.")


#: WorkBench's pandas (its requirements pin 2.1.4; numpy 1.x is what that pandas was built against)
PANDAS2_REQUIREMENTS = ("pandas==2.1.4", "numpy<2", "regex>=2022.1.18")  # regex: the engine's searches
PANDAS2_VENV = cache_root() / "pandas-2.1.4-venv"


def _pandas2_python() -> Path | None:
    """A Python with pandas 2.1.4: the cached venv, made here when CI=true (outside CI: only if already made)."""
    python = PANDAS2_VENV / "bin" / "python"
    if python.is_file() and subprocess.run([str(python), "-c", "import regex"], capture_output=True).returncode:
        # a venv made before the engine needed regex: add it (CI reuses the cached venv)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PANDAS2_REQUIREMENTS[2:]], check=True,
                       capture_output=True, timeout=900)  # fmt: skip
    if not python.is_file():
        if os.environ.get("CI", "").lower() not in ("true", "1", "yes"):
            return None
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(PANDAS2_VENV)], check=True, timeout=300)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PANDAS2_REQUIREMENTS],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
    return python


def _script_env() -> dict[str, str]:
    """The environment for this folder's scripts under another interpreter: the repo (ngym, for ngym.errors) and
    resources_servers/ on its path."""
    root = Path(__file__).resolve().parents[3]
    return {**os.environ, "PYTHONPATH": f"{root / 'resources_servers'}{os.pathsep}{root}"}


if pytest is not None:

    @pytest.mark.skipif(not (WORKBENCH / "processed").is_dir(), reason="needs WorkBench's data")
    def test_engine_agrees_with_pandas_reference() -> None:
        """The differential check with WorkBench's pandas 2: in-process when this interpreter has it, else in a
        venv of its own (the shared one has pandas 3)."""
        if _pandas2():
            correct, mismatches = fuzz(1500)
            assert not mismatches, mismatches[:3]
            assert 100 < correct < 1400
            return
        python = _pandas2_python()
        if python is None:
            pytest.skip(f"no pandas-2.1.4 venv at {PANDAS2_VENV}: CI=true makes it (or run the test once with CI=true)")
        env = {**_script_env(), "FUZZ_N": "1000"}
        done = subprocess.run(
            [str(python), __file__], capture_output=True, text=True, env=env, timeout=1200, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "mismatches=0" in done.stdout, done.stdout[-2000:]


if __name__ == "__main__":
    correct, mismatches = fuzz(int(os.environ.get("FUZZ_N", "3000")), int(os.environ.get("FUZZ_SEED", "0")))
    print(f"correct={correct} mismatches={len(mismatches)}")
    for m in mismatches[:5]:
        print(m)


def loader_mismatches(root: Path) -> list[str]:
    """Cells where the engine's CSV loader disagrees with ``pd.read_csv(dtype=str)``."""
    import pandas as pd
    from workplace_assistant.tables import is_missing, read_csv_as_strings
    from workplace_assistant.workspace import PROCESSED_FILES

    bad = []
    for name in PROCESSED_FILES.values():
        frame = pd.read_csv(root / "processed" / name, dtype=str)
        table = read_csv_as_strings(root / "processed" / name)
        assert list(frame.columns) == table.columns and len(frame) == len(table), name
        for row, mine in zip(frame.itertuples(index=False), table.rows, strict=True):
            for x, y in zip(row, mine, strict=True):
                if not (x == y or (pd.isna(x) and is_missing(y))):
                    bad.append(f"{name}: {x!r} != {y!r}")
    return bad


if pytest is not None:

    @pytest.mark.skipif(not (WORKBENCH / "processed").is_dir(), reason="needs WorkBench's data")
    def test_loader_matches_pandas_read_csv() -> None:
        pytest.importorskip("pandas")
        from workplace_assistant.workspace import SAMPLE_DIR

        assert loader_mismatches(WORKBENCH) == [] and loader_mismatches(SAMPLE_DIR) == []


if pytest is not None:

    @pytest.mark.skipif(not (WORKBENCH / "processed").is_dir(), reason="needs WorkBench's data")
    def test_rescoring_a_run_recorded_as_workbench_records_agrees_case_for_case(tmp_path: Path) -> None:
        # A run in WorkBench's results format: the email tasks done right (bodies with real line breaks, as
        # WorkBench's runner writes them), skipped, or ended by a runner error. Before ngym replaced line
        # breaks as WorkBench's scorer does, the multi-line emails disagreed.
        import ast
        import csv

        from workplace_assistant.replay import parse_workbench_action, render_workbench_action

        (tmp_path / "email").mkdir()
        source = WORKBENCH / "processed" / "queries_and_answers" / "email_queries_and_answers.csv"
        with open(source, newline="") as fh, open(tmp_path / "email" / "m_all_2024-03-21_15-21-12.csv", "w") as out:
            writer = csv.writer(out, quoting=csv.QUOTE_ALL)
            writer.writerow(["query", "function_calls", "full_response", "error"])
            for i, row in enumerate(csv.DictReader(fh)):
                calls = [render_workbench_action(c.method, c.kwargs) for c in
                         map(parse_workbench_action, ast.literal_eval(row["answer"]))]  # fmt: skip
                writer.writerow([row["query"], str([] if i % 3 == 0 else calls), "", "" if i % 7 else "Timeout"])
        # The script as a user runs it; its reference scorer needs WorkBench's pandas 2: this interpreter when it
        # has it, else the pandas-2.1.4 venv, as in the differential test (the shared interpreter has pandas 3).
        python = Path(sys.executable) if _pandas2() else _pandas2_python()
        if python is None:
            pytest.skip(f"no pandas-2.1.4 venv at {PANDAS2_VENV}: CI=true makes it (or run the test once with CI=true)")
        env = _script_env()
        script = Path(__file__).with_name("rescore_workbench_results.py")
        done = subprocess.run(
            [str(python), str(script), "--results", str(tmp_path), "--data", str(WORKBENCH)],
            capture_output=True,
            text=True,
            env=env,
            timeout=1200,
            check=False,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
        assert "0 disagreements" in done.stdout, done.stdout[-2000:]
