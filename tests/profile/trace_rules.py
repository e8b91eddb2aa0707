"""The Chrome Trace Event format's rules, as the tests check a sparsewire trace: required fields,
complete spans that nest per thread, async begins and ends that pair up, and flow ids with
exactly one start and one end. ``problems(events)`` returns one line per broken rule (empty: valid)."""

from __future__ import annotations

from collections import Counter, defaultdict

REQUIRED = {"X": ("name", "ts", "dur", "pid", "tid"), "b": ("name", "cat", "id", "ts", "pid"), "e": ("cat", "id", "ts", "pid")}
REQUIRED.update(
    {"s": ("name", "cat", "id", "ts", "pid"), "f": ("name", "cat", "id", "ts", "pid", "bp"), "M": ("name", "pid", "args")}
)


def problems(events: list[dict]) -> list[str]:
    found = []
    for event in events:
        missing = [key for key in REQUIRED.get(event.get("ph"), ("ph",)) if key not in event]
        if missing or event.get("ph") not in REQUIRED:
            found.append(f"event {event} lacks {missing or 'a known ph'}")
    spans = defaultdict(list)
    for event in events:
        if event.get("ph") == "X":
            if event["dur"] < 0:
                found.append(f"negative duration: {event}")
            spans[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
    for thread, intervals in spans.items():
        stack = []
        for start, end in sorted(intervals, key=lambda interval: (interval[0], -interval[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and end > stack[-1] + 1e-6:
                found.append(f"spans overlap without nesting on {thread} at {start}")
            stack.append(end)
    asyncs = defaultdict(list)
    for event in events:
        if event.get("ph") in ("b", "e"):
            asyncs[(event["pid"], event["cat"], event["id"])].append(event)
    for key, pair in asyncs.items():
        phases = sorted(e["ph"] for e in pair)
        if phases != ["b", "e"]:
            found.append(f"async {key}: {phases}, not one begin and one end")
        elif next(e for e in pair if e["ph"] == "e")["ts"] < next(e for e in pair if e["ph"] == "b")["ts"]:
            found.append(f"async {key} ends before it begins")
    flows = Counter((event["id"], event["ph"]) for event in events if event.get("ph") in ("s", "f"))
    for flow in {identity for identity, _ in flows}:
        if flows[(flow, "s")] != 1 or flows[(flow, "f")] != 1:
            found.append(f"flow {flow}: {flows[(flow, 's')]} starts and {flows[(flow, 'f')]} ends")
    return found


def receives_before_sends(events: list[dict]) -> list[str]:
    """Flows whose receive completed (f) before their send was posted (s), on the aligned clock."""
    starts = {event["id"]: event["ts"] for event in events if event.get("ph") == "s"}
    return [
        f"{event['id']}: {starts[event['id']] - event['ts']:.3f} us early"
        for event in events
        if event.get("ph") == "f" and event["id"] in starts and event["ts"] < starts[event["id"]]
    ]
