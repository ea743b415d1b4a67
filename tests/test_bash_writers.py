"""What the Bash parser reads from commands that write through an option, or through a
program of their own (sed, awk, perl, patch, sqlite3): the paths, or why it cannot tell
(issue 37, item 6). The forms that run end to end are in test_bash_boundary's ESCAPES."""

from __future__ import annotations

import pytest

from agent_lattice.workspace.bash._writes import read_command


def writes(command: str, env: dict[str, str] | None = None, base: str = ".") -> list[str]:
    reading = read_command(command, env=env or {}, base=base)
    assert reading.unsure == [], reading.unsure
    return reading.writes


def unsure(command: str, base: str = ".") -> list[str]:
    return read_command(command, env={}, base=base).unsure


@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        ("mktemp", {}, "/tmp/tmp.XXXXXXXXXX"),
        ("mktemp", {"TMPDIR": "/t"}, "/t/tmp.XXXXXXXXXX"),
        ("mktemp -p /d x.XXX", {"TMPDIR": "/t"}, "/d/x.XXX"),  # -p wins over TMPDIR
        ("mktemp -p /d -t x.XXX", {"TMPDIR": "/t"}, "/t/x.XXX"),  # but -t puts TMPDIR first
        ("mktemp -p /d -t x.XXX", {}, "/d/x.XXX"),
        ("mktemp --tmpdir x.XXX", {}, "/tmp/x.XXX"),
        ("mktemp sub/x.XXX", {"TMPDIR": "/t"}, "sub/x.XXX"),  # a template alone: from here
        ("TMPDIR=/e mktemp -d", {}, "/e/tmp.XXXXXXXXXX"),
    ],
)
def test_mktemp_creates_where_gnu_mktemp_does(command, env, expected):
    assert expected in writes(command, env)


def test_a_folder_only_known_when_it_runs_is_unsure():
    assert any("only known when" in r for r in unsure("mktemp -p $(pwd)/x"))
    assert any("only known when" in r for r in unsure("curl --output-dir $(pwd) -o f u"))
    assert writes("mktemp -u -p /anywhere") == []  # a dry run makes nothing


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sort -k2 -t, -o /o/s f", ["/o/s"]),
        ("shuf -n1 --output /o/s f", ["/o/s"]),
        ("iconv -f latin1 -t utf8 -o /o/i f", ["/o/i"]),
        ("base64 -i f -o /o/b", ["/o/b"]),  # BSD's base64
        ("gpg --output /o/g -c f", ["/o/g"]),
        ("m4 -F /o/frozen f", ["/o/frozen"]),
        ("csplit f 1", ["xx"]),
        ("split -l 1 --separator , f /o/p", ["/o/p"]),
        ("uniq -f 1 f /o/u", ["/o/u"]),
        ("link /o/victim h", ["h"]),
        ("rename .txt .md /o/a.txt", ["/o/a.txt", "/o/a.md"]),
        ("openssl req -x509 -keyout /o/k -out /o/c", ["/o/k", "/o/c"]),
        ("zstd f -o /o/z", ["/o/z"]),
        ("zstd f", ["f"]),
        ("lz4 f /o/z", ["/o/z"]),
        ("7z a /o/a.7z f", ["/o/a.7z"]),
        ("7z x a.7z -o/o/x", ["/o/x"]),
        ("zip -q -O /o/x.zip a.zip f", ["a.zip", "/o/x.zip"]),
        ("tar xfC a.tar /o", ["/o"]),  # old-style: f takes a.tar, C takes /o
        ("tar cvf /o/a.tar src", ["/o/a.tar"]),
    ],
)
def test_writers_by_option_or_operand(command, expected):
    assert writes(command) == expected


def test_a_hard_link_made_by_link_is_checked_like_ln():
    reading = read_command("link /o/victim h", env={})
    assert reading.links == [("/o/victim", ".")]


def test_split_filter_runs_with_file_named_after_the_pieces():
    assert writes("split -l1 --filter='gzip > $FILE.gz' f part_") == ["part_", "part_*.gz"]
    assert "/o/p*" in writes("split --filter='cat > $FILE' f /o/p")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sed -n 'w /o/w' f", ["/o/w"]),
        ("sed 's/a/b/gw /o/w' f", ["/o/w"]),
        ("sed -e 's|a|b|' -e '/x/W /o/w' f", ["/o/w"]),
        ("sed '1!G;h;$!d' f", []),
        ("sed -n '/x/{p;p}' f", []),
        ("sed 's/[/]/x/;a text; w /not/a/file' f", []),  # a's text runs to the line's end
        ("sed -i.bak s/a/b/ f", ["f"]),
        ("sed -i'/o/*.bak' s/a/b/ sub/f", ["sub/f", "/o/f.bak"]),
        ("sed -i'bak/*' s/a/b/ sub/f", ["sub/f", "bak/f", "sub/bak/f"]),
        ("sed '1e touch /o/e' f", ["/o/e"]),
    ],
)
def test_sed_scripts_are_read_for_the_files_they_write(command, expected):
    assert writes(command) == expected


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("sed 's/.*/rm -rf x/e' f", "runs the text it edits"),
        ("sed 's/a/b/Z' f", "could not be read"),
        ("sed -f /no/such/script f", "only known when it runs"),
        ('sed "$(cat script)" f', "only known when it runs"),
    ],
)
def test_sed_scripts_it_cannot_follow_are_unsure(command, reason):
    assert any(reason in r for r in unsure(command)), unsure(command)


def test_sed_and_awk_read_their_program_files(tmp_path):
    (tmp_path / "p.sed").write_text("s/a/b/\nw /o/from-sed\n")
    (tmp_path / "p.awk").write_text('{ print > "/o/from-awk" }\n')
    assert writes("sed -f p.sed f", base=str(tmp_path)) == ["/o/from-sed"]
    assert writes("cd . && awk -f p.awk f", base=str(tmp_path)) == ["/o/from-awk"]


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("$3 > 100 { print $1 }", []),  # a comparison, not a redirection
        ("{ print ($1 > 2), $2 }", []),
        ('{ print $1, $2 > "/o/a" }', ["/o/a"]),
        ('{ printf("%s\\n", $1) >> "/o/a" }', ["/o/a"]),
        ('{ print a,\n b > "/o/a" }', ["/o/a"]),  # the statement goes on after a comma
        ('{ x = a / 2 > "f"; print x }', []),
        ('/a>b/ { print > "/dev/stderr" }', ["/dev/stderr"]),
        ('{ print | "sort > /o/sorted" }', ["/o/sorted"]),
        ('BEGIN { system("touch /o/s") }', ["/o/s"]),
        ('BEGIN { "date > /o/d" | getline now }', ["/o/d"]),
        ('BEGIN { while ((getline l < "/etc/hosts") > 0) n++; print n }', []),
    ],
)
def test_awk_programs_are_read_for_their_output_redirections(program, expected):
    quoted = program.replace("'", "'\\''")
    assert writes(f"awk '{quoted}' f") == expected


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("awk '{ print > $2 }' f", "only known when the command runs"),
        ("awk '{ print | cmd }' f", "only known when the command runs"),
        ("awk 'BEGIN { system(x) }'", "only known when the command runs"),
        ("awk 'BEGIN { print \"x }'", "could not be read"),
        ("gawk -l filefuncs 'BEGIN { }'", "loads an awk extension"),
        ("gawk -i mylib 'BEGIN { }'", "includes an awk library"),
        ("awk '@load \"rwarray\"\nBEGIN { }'", "@load"),
    ],
)
def test_awk_programs_it_cannot_follow_are_unsure(command, reason):
    assert any(reason in r for r in unsure(command)), unsure(command)


def test_gawk_in_place_and_profile_files():
    assert writes("gawk -i inplace '{ print }' a v=1 b") == ["a", "b"]
    assert writes("gawk '@include \"inplace\"\n{ print }' a") == ["a"]
    assert writes("gawk -p/o/prof 'BEGIN { }'") == ["/o/prof"]
    assert writes("gawk --dump-variables 'BEGIN { }'") == ["awkvars.out"]


@pytest.mark.parametrize(
    "command",
    [
        "perl -ne 'print if /x/' f",
        "perl -lane 'print $F[0]' f",
        "perl -0777 -pe 's/a\\nb/c/g' f",
        "perl -MList::Util=sum -le 'print sum(1, 2)'",
        "perl -lne 'binmode STDOUT, \":utf8\"; $h->{$_}++; END { print for keys %$h }' f",
    ],
)
def test_perl_one_liners_that_only_print_are_followed(command):
    assert writes(command) == []


@pytest.mark.parametrize(
    "command",
    [
        "perl -e 'open(F, \">/o/p\")'",
        "perl -e 'system(\"touch /o/p\")'",
        "perl -e 'print `touch /o/p`'",
        "perl -pe 's/(.*)/$1/ee' f",
        'perl -MFile::Copy -e \'copy("f", "/o/p")\'',
        'perl -e "$(cat code)"',
    ],
)
def test_perl_one_liners_that_may_write_are_unsure(command):
    assert unsure(command) != []


def test_perl_in_place_writes_its_files_and_backups():
    assert writes("perl -pi.bak -e 's/a/b/' f g") == ["f", "f.bak", "g", "g.bak"]
    assert writes("perl -i'/o/*' -pe 1 f") == ["f", "/o/f"]


DIFF = "--- a/src/x.py\t2024-01-01\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def test_patch_writes_the_files_its_patch_names(tmp_path):
    (tmp_path / "fix.diff").write_text(DIFF)
    base = str(tmp_path)
    assert writes("patch -p1 < fix.diff", base=base) == ["src/x.py"]
    assert writes("patch -p1 -i fix.diff", base=base) == ["src/x.py"]
    assert writes("patch -d /o -p1 -i fix.diff", base=base) == ["/o/src/x.py"]
    every = writes("patch < fix.diff", base=base)  # no -p: each level it may strip to
    assert every == ["a/src/x.py", "src/x.py", "x.py", "b/src/x.py"]
    assert writes(f"patch -p1 <<'EOF'\n{DIFF}EOF") == ["src/x.py"]
    assert writes("patch /o/victim fix.diff", base=base) == ["/o/victim"]
    assert writes("patch -o /o/out -p1 -i fix.diff", base=base) == ["/o/out"]
    assert writes("patch -b -B /o/ -p1 < fix.diff", base=base) == ["src/x.py", "/o/src/x.py"]
    assert writes("patch --dry-run -p1 < fix.diff", base=base) == []
    outside = "--- /etc/x\n+++ ../../o/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert writes(f"patch -p0 <<'EOF'\n{outside}EOF") == ["/etc/x", "../../o/x"]


@pytest.mark.parametrize(
    "command",
    [
        "patch -p1",  # standard input the reader does not see
        "git diff | patch -p1",
        "patch -p1 < missing.diff",
        "patch -p1 <<EOF\n--- $TARGET\nEOF",  # a here-document that expands
        "cat <<'EOF' && patch -p0 <<'EOF'\nA\nEOF\n--- /o/x\nEOF",  # tree-sitter mixes them up
        "patch -d $(pwd) -p1 -i fix.diff",
    ],
)
def test_patches_it_cannot_see_are_unsure(command):
    assert unsure(command) != []


def test_sqlite3_writes_its_database_and_refuses_sql_that_writes_elsewhere():
    assert writes("sqlite3 /o/db 'create table t(x)'") == ["/o/db"]
    assert writes("sqlite3 :memory: 'select 1'") == []
    assert writes("sqlite3 -readonly db '.tables'") == []
    assert writes("sqlite3 db <<'EOF'\n.headers on\nselect 1;\nEOF") == ["db"]
    for sql in ["attach '/o/x' as x", "vacuum into '/o/x'", ".output /o/x", ".shell touch x"]:
        assert unsure(f'sqlite3 db "{sql}"') != [], sql
    assert unsure("sqlite3 db") != []  # SQL from standard input it does not see


def test_editors_are_unsure():
    for command in ["ed -s f", "vim -es -c 'w! /o/v' f", "ex -sc 'w /o/v' f", "emacs --batch"]:
        assert any("editor" in r for r in unsure(command)), command
    assert unsure("vim --version") == []


def test_git_writes_outside_its_usual_places():
    assert writes("git diff --output=/o/d") == ["/o/d"]
    assert writes("git log -p --output /o/l") == ["/o/l"]
    assert writes("git format-patch -o /o HEAD~1") == ["/o"]
    assert writes("git config -f /o/c a.b c") == ["/o/c"]
    assert writes("git config --global user.name x", {"HOME": "/h"}) == ["/h/.gitconfig"]
    assert writes("git -C /o/repo tag v1") == ["/o/repo"]
    assert writes("git status && git diff --stat && git branch -a && git tag -l") == []
