"""The Bash write boundary: the command parser, and the OS sandbox behind it (issue 13, 5)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from asyncio.subprocess import PIPE, STDOUT
from pathlib import Path

import pytest

from agent_lattice import ConfigurationError, ToolContext, _settings, create_agent_workspace_tools
from agent_lattice.testing import assert_eventually
from agent_lattice.workspace._sandbox import _warn_once, sandbox_problem
from agent_lattice.workspace.bash._writes import read_command

NO_SANDBOX = sandbox_problem()
MODES = [
    "off",
    pytest.param(
        "required",
        marks=pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}"),
    ),
]


@pytest.fixture
def var_tmp():
    """A folder outside /tmp: the sandbox has a /tmp of its own, which would hide an escape."""
    path = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="lattice-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=MODES)
def box(request, var_tmp, monkeypatch):
    """A workspace, an outside folder with a file in it, a home folder: all under var_tmp."""
    root, outside, home = var_tmp / "ws", var_tmp / "outside", var_tmp / "home"
    for folder in (root, outside, home):
        folder.mkdir()
    (outside / "victim").write_text("original")
    (root / "f").write_text("inside")
    (root / "src").mkdir()
    (root / "src" / "a.txt").write_text("a")
    subprocess.run(["tar", "-cf", "a.tar", "f"], cwd=root, check=True)
    with zipfile.ZipFile(root / "a.zip", "w") as z:
        z.writestr("z.txt", "zipped")
    subprocess.run(["git", "init", "-q", "repo"], cwd=root, check=True)
    monkeypatch.setenv("HOME", str(home))
    tools = {t.name: t for t in create_agent_workspace_tools(root, sandbox=request.param)}
    return root, outside, tools, request.param


def snapshot(tmp_path: Path) -> dict[str, object]:
    """Everything outside the workspace: names, contents and modification times."""
    seen: dict[str, object] = {str(tmp_path): tmp_path.stat().st_mtime_ns}
    for path in tmp_path.rglob("*"):
        if path.is_relative_to(tmp_path / "ws"):
            continue
        stat = path.lstat()
        seen[str(path)] = (stat.st_mtime_ns, path.read_bytes() if path.is_file() else None)
    return seen


async def bash(tools, command: str):
    ctx = ToolContext(session_id="s", tool_use_id="t", tool_name="Bash")
    return await tools["Bash"].invoke({"command": command}, ctx)


DIFF = "--- f\\n+++ f\\n@@ -1 +1 @@\\n-inside\\n+patched\\n"  # a patch of the file f

ESCAPES = [
    "cd .. && touch x",
    "cd {out}; echo x > f",
    "pushd {out} && touch f",
    "cd && touch f",
    "HOME={out} cd && touch f",
    "D={out}; touch $D/f",
    "ln -s {out} l && echo x > l/f",
    "ln {out}/victim h && echo x >> h",
    "echo {out}/f | xargs touch",
    "find {out} -exec touch {{}} +",
    "tar -cf {out}/x.tar .",
    "cp --target-directory={out} f",
    "git clone -q repo {out}/z",
    "tar -C {out} -xf a.tar",
    "curl -s -o {out}/f file://$PWD/f",
    "wget -q -O {out}/f http://127.0.0.1:9/",
    "unzip -q a.zip -d {out}",
    "rsync -a src/ {out}/",
    # and a few more ways in the same spirit
    'eval "touch {out}/e"',
    "sh -c 'cd {out} && touch s'",
    "f() {{ touch g; }}; cd {out}; f",
    "cd src; cd ../..; touch up",
    "echo x > ~/f",
    "install -d {out}/made",
    "mv f {out}/",
    "mv {{f,{out}/moved}}",  # brace expansion makes two words: mv f <outside>/moved
    'cd "$(dirname {out}/x)" && touch w',
    "trap 'touch {out}/t' EXIT",
    "command_not_found_handle() {{ touch {out}/c; }}; no-such-command",
    "CDPATH={tmp}; cd outside && touch p",
    "echo touch {out}/piped | bash",
    "flock lock -c 'touch {out}/locked'",
    # positional parameters, which were read as always empty
    "f() {{ echo x > $1; }}; f {out}/g",
    "sh -c 'echo x > \"$1\"' _ {out}/s1",
    "set -- {out}/h; echo x > $1",
    # a subshell's cd holds for the rest of it; a coprocess runs its command
    "(cd {out}; touch sub)",
    "coproc touch {out}/co",
    "coproc N {{ touch {out}/co2; }}",
    "echo x > ~+/../outside/plus",  # ~+ is $PWD, ~- is $OLDPWD
    "cd {out}; cd ~-; cd ~-; touch minus",
    "history -w {out}/hist",
    "hash -p /bin/touch t; t {out}/hashed",
    "cat <<'EOF' > notes && touch {out}/after\nx\nEOF",  # tree-sitter nests it in the heredoc
    # issue 37: writers the parser did not know, or knew only in part
    "shuf -o {out}/s f",
    "shuf -e a b --output={out}/s",
    "mktemp -p {out}",
    "mktemp -d --tmpdir={out} x.XXXXXX",
    "TMPDIR={out} mktemp",
    "TMPDIR={out} mktemp -t x.XXXXXX",
    "mktemp {out}/x.XXXXXX",
    "split --filter='cat > {out}/$FILE' f",
    "csplit -s -f {out}/cs f 1",
    "csplit -s --prefix {out}/cs f 1",
    f"printf -- '{DIFF}' > fix.diff && patch -s {{out}}/victim fix.diff",
    f"printf -- '{DIFF}' > fix.diff && patch -s -b -B {{out}}/ -p0 < fix.diff",
    'awk \'BEGIN {{ print "x" > "{out}/a" }}\'',
    'awk \'{{ printf "%s", $0 >> "{out}/a" }}\' f',
    'awk \'BEGIN {{ print "x" | "cat > {out}/a" }}\'',
    "awk 'BEGIN {{ system(\"touch {out}/a\") }}'",
    "awk 'BEGIN {{ \"touch {out}/a\" | getline }}'",
    "gawk -i inplace '{{ print \"x\" }}' {out}/victim",
    'perl -e \'open(my $f, ">", "{out}/p") or die $!\'',
    "perl -e 'system(\"touch {out}/p\") == 0 or die'",
    'perl -MFile::Copy -e \'copy("f", "{out}/p") or die $!\'',
    "sed -n 'w {out}/w' f",
    "sed 's/i/I/w {out}/w' f",
    "sed '1e touch {out}/e' f",
    "sed -i'{out}/*' s/i/I/ f",
    "iconv -f utf-8 -t utf-8 -o {out}/i f",
    "link {out}/victim h && echo x >> h",
    "uniq --skip-fields 1 f {out}/u",
    "openssl rand -out {out}/o 8",
    "openssl enc -base64 -in f -out {out}/o",
    "zstd -q f -o {out}/z",
    "lz4 -q f {out}/z",
    "tar xfC a.tar {out}",
    "sqlite3 {out}/db 'create table t(x)'",
    "sqlite3 db '.shell touch {out}/s' '.exit 1'",
    "ed -s {out}/victim <<< $'a\\nx\\n.\\nw'",
    "vim -es -c 'w! {out}/v' -c '!touch {out}/v' -c cq f",
    "ex -s -c '!touch {out}/x' -c cq f",
]


@pytest.mark.parametrize("command", ESCAPES)
async def test_every_escape_is_refused(box, var_tmp, command):
    _, outside, tools, mode = box
    before = snapshot(var_tmp)
    result = await bash(tools, command.format(out=outside, tmp=var_tmp))
    assert result.is_error, result.content
    if mode == "required" and not result.content.startswith("{"):
        # what the parser cannot follow (xargs, a computed cd) runs, and the kernel refuses
        assert "Read-only file system" in result.content, result.content
    else:
        payload = json.loads(result.content)
        assert payload["error"] == "permission_denied" and payload["tool"] == "Bash"
        assert "requested_path" in payload or payload["reason"].startswith("cannot tell where")
    assert snapshot(var_tmp) == before  # nothing was written outside


LEGITIMATE = [
    ("mkdir -p sub/deeper && cd sub && echo hi > deeper/x && cat deeper/x", "sub/deeper/x"),
    ("ls -la | grep src | wc -l > count.txt 2>/dev/null", "count.txt"),
    ("cat <<'EOF' > notes.md\nhello > there\nEOF", "notes.md"),
    (
        "cd repo && git add -A && git -c user.name=a -c user.email=a@b commit -qm init --allow-empty",
        "repo/.git/HEAD",
    ),
    ("git init -q fresh && cd fresh && echo x > y", "fresh/y"),
    ("for n in 1 2; do echo $n > n$n.txt; done; [[ -f n1.txt ]] && echo $((1+1)) > sum", "n2.txt"),
    ('case "$PWD" in */ws) echo matched > case.txt;; esac', "case.txt"),
    ("tar -cf out.tar src && tar -xf out.tar -C src && unzip -qo a.zip -d unz", "unz/z.txt"),
    ("pushd src >/dev/null && touch p && popd >/dev/null && touch q", "src/p"),
    ("D=build; mkdir -p $D && cp -r src/. $D/ && ln -s a.txt $D/link", "build/link"),
    ("echo warn >&2; tmp=$TMPDIR; echo done > done.txt", "done.txt"),
    ("touch f{1..3} {a,b}.txt && rm f1 && cp f{,.bak}", "f.bak"),
    ("(cd src; touch in-src); touch top", "src/in-src"),
    # what the parser now reads, used inside the workspace
    ('awk \'$1 > 0 { print $1 > "awk.txt" } END { print NR | "cat > n.txt" }\' f', "n.txt"),
    ("awk 'BEGIN { system(\"mkdir -p made\") }' && sed -n 's/i/I/w sed.txt' f", "sed.txt"),
    ("sort -o s.txt f && shuf -o shuf.txt f && split -l 1 f piece. && csplit -s f 1", "xx00"),
    ("cd src && mktemp -p . && mktemp tmp.XXXXXX && mktemp -d --tmpdir=.", "src"),
    (
        "echo old > g && patch -s -p1 <<'EOF'\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-old\n+new\nEOF",
        "g",
    ),
    ("perl -ne 'print if /i/' f > perl.txt && perl -pi -e 's/i/I/' perl.txt", "perl.txt"),
    ("sqlite3 db 'create table t(x); insert into t values (1)' && head -1 /proc/cpuinfo", "db"),
]


@pytest.mark.parametrize(("command", "made"), LEGITIMATE)
async def test_ordinary_commands_inside_the_workspace_still_work(box, command, made):
    root, _, tools, _ = box
    result = await bash(tools, command)
    assert not result.is_error, result.content
    assert (root / made).exists() or (root / made).is_symlink()


async def test_bash_script_sh_is_read_like_source(box):
    """``bash build.sh`` was refused outright without the sandbox ("does not follow"), while
    ``./build.sh`` ran unread: the script is read, as ``source`` reads one."""
    root, outside, tools, _ = box
    (root / "build.sh").write_text("mkdir -p out && echo built > out/x\n")
    (root / "leak.sh").write_text(f"echo x > {outside}/leak\n")
    built = await bash(tools, "bash build.sh && sh build.sh")
    assert not built.is_error, built.content
    assert (root / "out" / "x").read_text() == "built\n"
    leak = await bash(tools, "bash leak.sh")
    assert json.loads(leak.content)["requested_path"] == str(outside / "leak")
    assert not (outside / "leak").exists()


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
async def test_the_kernel_stops_what_the_parser_cannot_see(var_tmp, monkeypatch):
    root, outside = var_tmp / "ws", var_tmp / "outside"
    root.mkdir()
    outside.mkdir()
    granted = var_tmp / "granted"
    granted.mkdir()
    tools = {t.name: t for t in create_agent_workspace_tools(root, sandbox="required")}
    ctx = ToolContext(
        session_id="s", tool_use_id="t", tool_name="Bash", workspace_grants=(str(granted),)
    )
    sneaky = (
        f"python3 -c \"open('{outside}/py', 'w').write('x')\"; cd $(echo {outside}) && touch cd"
    )
    result = await tools["Bash"].invoke({"command": sneaky}, ctx)
    assert result.content.count("Read-only file system") == 2, result.content
    assert list(outside.iterdir()) == []
    fine = f"echo g > {granted}/g && echo t > /tmp/t && cat /tmp/t && echo w > w"
    result = await tools["Bash"].invoke({"command": fine}, ctx)
    assert not result.is_error, result.content
    assert (granted / "g").exists() and (root / "w").exists()
    assert "t" in (await tools["Bash"].invoke({"command": "cat /tmp/t"}, ctx)).content
    assert not Path("/tmp/t").exists()  # noqa: ASYNC240 - the sandbox's /tmp is its own, kept between commands
    # its own process namespace: the worker's /proc/<pid>/environ (its credentials) is not there
    procs = await tools["Bash"].invoke({"command": "ls -d /proc/[0-9]* | wc -l"}, ctx)
    assert int(procs.content.split()[0]) <= 4
    offline = create_agent_workspace_tools(root, sandbox="required", network=False)
    ip = await offline[-1].invoke({"command": "cat /proc/net/dev | wc -l"}, ctx)
    assert ip.content.startswith("3")  # the loopback device alone
    started = time.monotonic()
    slow = await tools["Bash"].invoke({"command": "sleep 300 & sleep 301", "timeout": 0.5}, ctx)
    assert "timed out" in slow.content and time.monotonic() - started < 10

    def none_left() -> None:  # killing the sandbox killed all it started (the kernel ends a
        # PID namespace's processes when its init dies; they are reaped a moment later)
        ps = subprocess.run(["pgrep", "-f", "sleep 30[01]"], capture_output=True, text=True)
        assert ps.stdout == "", ps.stdout

    await assert_eventually(none_left, within=5)


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
@pytest.mark.skipif(os.geteuid() != 0, reason="only a worker running as root has capabilities")
async def test_a_root_worker_cannot_remount_its_way_out(tmp_path):
    """A worker running as root (a container, CI) kept every capability inside bwrap, so
    ``mount -o remount,rw /`` made the whole filesystem writable again."""
    root, outside = tmp_path / "ws", Path("/var/tmp") / f"lattice-remount-{os.getpid()}"
    root.mkdir()
    outside.mkdir(exist_ok=True)
    try:
        tools = {t.name: t for t in create_agent_workspace_tools(root, sandbox="required")}
        sneaky = f"mount -o remount,rw / ; python3 -c \"open('{outside}/x', 'w')\""
        result = await bash(tools, sneaky)
        assert "Read-only file system" in result.content, result.content
        assert list(outside.iterdir()) == []
        # uid 0 needs no capability to write a sysctl (core_pattern runs a program as the
        # host's root): the same value written back, so the test changes nothing if it fails
        knob = "/proc/sys/vm/swappiness"
        same = f"python3 -c \"p = '{knob}'; v = open(p).read(); open(p, 'w').write(v)\""
        sysctl = await bash(tools, same)
        assert sysctl.is_error and "Read-only file system" in sysctl.content, sysctl.content
        # what root may still do inside the workspace: unpack an archive made elsewhere
        with tarfile.open(root / "a.tar", "w") as archive:
            member = tarfile.TarInfo("a")
            member.uid = member.gid = 1000
            archive.addfile(member, io.BytesIO(b""))
        unpacked = await bash(tools, "mkdir x && tar -xf a.tar -C x && chown 0 x/a")
        assert not unpacked.is_error, unpacked.content
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
async def test_a_granted_path_the_command_turned_into_a_link_is_not_followed(var_tmp):
    """A grant (or an extra root not made yet) inside the workspace is the command's to
    shape: made a link to an outside folder, bwrap bound that folder writable."""
    root, outside = var_tmp / "ws", var_tmp / "outside"
    root.mkdir()
    outside.mkdir()
    tools = create_agent_workspace_tools(root, extra_roots=[root / "later"], sandbox="required")
    bash_tool = {t.name: t for t in tools}["Bash"]
    link = f"python3 -c \"import os; [os.symlink('{outside}', n) for n in ('granted', 'later')]\""
    made = await bash_tool.invoke(
        {"command": link}, ToolContext(session_id="s", tool_use_id="t", tool_name="Bash")
    )
    assert not made.is_error, made.content
    ctx = ToolContext(
        session_id="s", tool_use_id="t", tool_name="Bash", workspace_grants=(str(root / "granted"),)
    )
    for name in ("granted", "later"):
        sneaky = f"python3 -c \"open('{outside}/{name}', 'w')\""
        result = await bash_tool.invoke({"command": sneaky}, ctx)
        assert "Read-only file system" in result.content, result.content
        direct = await bash_tool.invoke({"command": f"echo x > {name}/f"}, ctx)
        assert json.loads(direct.content)["error"] == "permission_denied"
    assert list(outside.iterdir()) == []


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
async def test_tools_that_cache_in_home_or_write_to_tmpdir_still_work(var_tmp, monkeypatch):
    """The home folder is read-only in the sandbox: npm install failed (EROFS on ~/.npm),
    and so did mktemp where the worker's TMPDIR is not /tmp."""
    root, home, host_tmp = var_tmp / "ws", var_tmp / "home", var_tmp / "tmp"
    for folder in (root, home, host_tmp):
        folder.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(host_tmp))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("npm_config_cache", raising=False)
    tools = {t.name: t for t in create_agent_workspace_tools(root, sandbox="required")}
    # what pip, uv, go and yarn (XDG cache) and npm (its own cache) do on their own
    cache = (
        'python3 -c "import os; e, h = os.environ.get, os.path.expanduser; '
        "[os.makedirs(p, exist_ok=True) for p in (e('XDG_CACHE_HOME', h('~/.cache')) + '/pip', "
        "e('npm_config_cache', h('~/.npm')) + '/_logs')]\" && mktemp && echo built > out"
    )
    result = await bash(tools, cache)
    assert not result.is_error, result.content
    assert (root / "out").exists()
    assert list(home.iterdir()) == [] and list(host_tmp.iterdir()) == []


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
@pytest.mark.skipif(not os.access("/run", os.W_OK), reason="only root can make a socket in /run")
async def test_the_services_sockets_in_run_are_out_of_reach(tmp_path):
    """A read-only mount does not stop connect(): a command reached the sockets in /run
    (docker, systemd, dbus, postgres), whose servers write wherever they like, even with
    network=False."""
    folder = Path(tempfile.mkdtemp(dir="/run", prefix="lattice-test-"))
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "s.sock"))
    server.listen(1)
    try:
        root = tmp_path / "ws"
        tools = create_agent_workspace_tools(root, sandbox="required", network=False)
        reach = (
            'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
            f"s.connect('{folder}/s.sock'); s.send(b'write this')\""
        )
        result = await bash({"Bash": tools[-1]}, reach)
        assert result.is_error and "No such file or directory" in result.content, result.content
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


KILLED_WORKER = """
import asyncio, os, signal, sys
from agent_lattice import ConfigurationError, ToolContext, _settings, create_agent_workspace_tools

async def main():
    bash = create_agent_workspace_tools(sys.argv[1], sandbox="required")[-1]
    ctx = ToolContext(session_id="s", tool_use_id="t", tool_name="Bash")
    done = await bash.invoke({"command": sys.argv[2]}, ctx)
    print(done.content, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


@pytest.fixture
def shared_memory():
    """A SysV shared memory segment of the host's, its id."""
    made = subprocess.run(["ipcmk", "-M", "64"], capture_output=True, text=True, check=True)
    shmid = made.stdout.split()[-1]
    yield shmid
    subprocess.run(["ipcrm", "-m", shmid], check=False)


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
@pytest.mark.skipif(shutil.which("ipcmk") is None, reason="no ipcmk (util-linux) to make one")
async def test_the_hosts_shared_memory_segments_are_out_of_reach(tmp_path, shared_memory):
    """SysV shared memory (a database's, say) is not a file: a read-only mount does not
    guard it, and the sandbox shared the host's."""
    tools = {t.name: t for t in create_agent_workspace_tools(tmp_path, sandbox="required")}
    seen = await bash(tools, "ipcs -m")
    assert "Shared Memory" in seen.content and shared_memory not in seen.content.split()


def private_tmps_holding(name: str) -> list[Path]:
    tmp = Path(tempfile.gettempdir())
    return [p for p in tmp.glob("lattice-bash-tmp-*") if (p / name).exists()]


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no OS sandbox: {NO_SANDBOX}")
async def test_a_killed_worker_leaves_no_new_private_tmp_behind(var_tmp):
    """Each worker made a fresh private /tmp and removed it only at a clean exit: every
    killed worker left one behind (with the caches in it), and the next one started empty.
    Now the next worker on that workspace finds the same one again."""
    root, marker = var_tmp / "ws", f"kept-{os.getpid()}-{time.monotonic_ns()}"
    outputs = []
    for command in (f"echo kept > /tmp/{marker}", f"cat /tmp/{marker}"):
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-c", KILLED_WORKER, str(root), command, stdout=PIPE, stderr=STDOUT
        )
        out, _ = await run.communicate()
        assert run.returncode == -signal.SIGKILL, out
        outputs.append(out.decode())
    holding = private_tmps_holding(marker)
    try:
        assert outputs[1].startswith("kept"), outputs
        assert len(holding) == 1, holding
    finally:
        for path in holding:
            shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("bwrap", "reason"),
    [
        (None, "bubblewrap is not installed"),
        # present but unusable (no user namespaces, say): probed once, not on every command
        (
            "echo probed >> {log}; echo 'bwrap: No permissions to create new namespace' >&2; "
            "exit 1",
            "bwrap is installed but cannot create a sandbox here (bwrap: No permissions",
        ),
    ],
)
async def test_without_a_sandbox_auto_warns_once_and_required_or_offline_refuses(
    tmp_path, monkeypatch, caplog, bwrap, reason
):
    bin_dir, log = tmp_path / "bin", tmp_path / "probes.log"
    bin_dir.mkdir()
    bash_path = shutil.which("bash", path=os.defpath)
    assert bash_path is not None
    (bin_dir / "bash").symlink_to(bash_path)
    if bwrap is not None:
        (bin_dir / "bwrap").write_text(f"#!{bash_path}\n{bwrap.format(log=log)}\n")
        (bin_dir / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    sandbox_problem.cache_clear()
    _warn_once.cache_clear()
    try:
        ctx = ToolContext(session_id="s", tool_use_id="t", tool_name="Bash")
        auto = create_agent_workspace_tools(tmp_path / "a")[-1]
        with caplog.at_level(logging.WARNING, logger="agent_lattice.workspace"):
            for _ in range(3):
                assert not (await auto.invoke({"command": "echo ok"}, ctx)).is_error
            escape = await auto.invoke({"command": "cd .. && touch x"}, ctx)
        assert json.loads(escape.content)["error"] == "permission_denied"  # the parser holds
        warned = [
            r.getMessage() for r in caplog.records if "without an OS sandbox" in r.getMessage()
        ]
        assert len(warned) == 1 and reason in warned[0]
        required = create_agent_workspace_tools(tmp_path / "r", sandbox="required")[-1]
        refused = await required.invoke({"command": "touch x"}, ctx)
        assert refused.is_error and 'sandbox="required"' in refused.content
        assert reason in refused.content
        assert not (tmp_path / "r" / "x").exists() and not (tmp_path / "x").exists()
        if bwrap is not None:
            assert log.read_text().count("probed") == 1
        # network=False cannot be had without the sandbox: refused, not run online
        offline = create_agent_workspace_tools(tmp_path / "n", network=False)[-1]
        cut_off = await offline.invoke({"command": "touch x"}, ctx)
        assert cut_off.is_error and "network=False" in cut_off.content, cut_off.content
        assert reason in cut_off.content and not (tmp_path / "n" / "x").exists()
        # LATTICE_SANDBOX=required on the worker: the tools left at "auto" refuse too
        monkeypatch.setenv("LATTICE_SANDBOX", "required")
        held = await auto.invoke({"command": "echo y > y"}, ctx)
        assert held.is_error and "LATTICE_SANDBOX=required" in held.content, held.content
        assert reason in held.content and not (tmp_path / "a" / "y").exists()
        off = create_agent_workspace_tools(tmp_path / "o", sandbox="off")[-1]  # said on purpose
        assert not (await off.invoke({"command": "echo y > y"}, ctx)).is_error
    finally:
        sandbox_problem.cache_clear()


def test_the_parser_gives_up_safely_on_huge_commands():
    chain = " && ".join(f"echo {i} > f{i}" for i in range(3000))
    assert "it chains too many commands to follow" in read_command(chain, env={}).unsure
    cds = "\n".join(f"cd d{i} && echo x > f{i}" for i in range(200))  # 2**200 directories
    reading = read_command(cds, env={})
    assert any("directory not known" in r for r in reading.unsure)


def test_lattice_sandbox_is_auto_or_required(monkeypatch):
    for value, mode in (("", "auto"), ("auto", "auto"), (" Required ", "required")):
        monkeypatch.setenv("LATTICE_SANDBOX", value)
        assert _settings.bash_sandbox() == mode
    monkeypatch.setenv("LATTICE_SANDBOX", "off")  # a worker setting may only ask for more
    with pytest.raises(ConfigurationError, match="LATTICE_SANDBOX='off' is not 'auto' or"):
        _settings.bash_sandbox()
