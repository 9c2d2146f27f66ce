"""Datasets (stork.dataset): directories, globs and url_lists expanded into files.

Local trees are real directories in tmp_path; remote listings go through the real
globus-gridftp-server of the session (`gridftp` fixture) over ftp://, with MLSD, with the
NLST + SIZE fallback and through `globus-url-copy -list` (the gsiftp lister, which lists
ftp:// URLs the same way). A connection closed in the middle of a listing, a server that
answers only whole batches of pipelined commands and one without MLSD come from a tiny
FTP server in this file.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import pytest

from stork.dataset import (
    MAX_FILES_KNOB,
    Dataset,
    DatasetError,
    DatasetUnreachable,
    Entry,
    FtpLister,
    Lister,
    LocalLister,
    RemoteLister,
    expand,
    is_dataset,
    listed_locally,
)
from stork.transfer.verify import size_of
from tests.support import GridFtpServer, make_file


def url(path: Path, directory: bool = False) -> str:
    return "file://" + quote(str(path)) + ("/" if directory else "")


def rels(dataset: Dataset) -> list[str]:
    return [f.rel_path for f in dataset.files]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """data/ with files of known sizes, a symlink to a file, a dot file, a name with a
    space and two levels of subdirectories."""
    data = tmp_path / "data"
    (data / "sub" / "deep").mkdir(parents=True)
    for name, size in [("a.h5", 5), ("b.h5", 3), ("notes.txt", 7), (".hidden.h5", 1),
                       ("sp ace.h5", 2), ("sub/c.h5", 11), ("sub/deep/d.txt", 13)]:
        (data / name).write_bytes(b"x" * size)
    (data / "link.h5").symlink_to("a.h5")
    return data


class Counting(Lister):
    """A real lister, counting the entries the walk pulled from it."""

    def __init__(self, inner: Lister) -> None:
        self.inner = inner
        self.pulled = 0

    def list_dir(self, url: str) -> Iterator[Entry]:
        listing = self.inner.list_dir(url)
        try:
            for entry in listing:
                self.pulled += 1
                yield entry
        finally:
            getattr(listing, "close", lambda: None)()

    def dir_id(self, url: str) -> Hashable | None:
        return self.inner.dir_id(url)

    def close(self) -> None:
        self.inner.close()


# -- what is a dataset ----------------------------------------------------------------------

@pytest.mark.parametrize("src, url_list, dataset, local", [
    ("file:///data/run1/", None, True, True),
    ("file:///data/run1/*.h5", None, True, True),
    ("ftp://h/data/file?.dat", None, True, False),
    ("gsiftp://h/data/[ab].dat", None, True, False),
    ("gsiftp://h/data/", None, True, False),
    ("file:///data/run1/a.h5", None, False, True),
    ("ftp://h/data/*/a.h5", None, False, False),  # a glob only counts in the last segment
    ("http://h/get?id=3", None, False, False),  # a query, not a glob
    (None, "pairs.txt", True, True),
    ("ftp://h/x/", "pairs.txt", True, True),
])
def test_is_dataset_and_where_it_is_listed(src: str | None, url_list: str | None,
                                           dataset: bool, local: bool) -> None:
    assert is_dataset(src, url_list) is dataset
    assert listed_locally(src, url_list) is local


# -- local directories and globs ------------------------------------------------------------

def test_a_directory_lists_its_files_with_sizes_and_maps_them_into_dest(
        tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ds = expand(url(tree, True), url(out, True), max_files=100)
    assert rels(ds) == [".hidden.h5", "a.h5", "b.h5", "link.h5", "notes.txt", "sp ace.h5"]
    assert ds.skipped_dirs == 1  # sub/, recursive is false
    assert ds.count == 6 and ds.total_bytes == 1 + 5 + 3 + 5 + 7 + 2
    by_name = {f.rel_path: f for f in ds.files}
    assert by_name["link.h5"].size_bytes == 5  # a symlink to a file is that file
    spaced = by_name["sp ace.h5"]
    assert spaced.src_url == url(tree) + "/sp%20ace.h5"
    assert spaced.dest_url == url(out) + "/sp%20ace.h5"
    for f in ds.files:  # every source URL names the file, every size is the file's
        assert size_of(f.src_url) == f.size_bytes


def test_recursive_keeps_subdirectories_and_dest_needs_no_trailing_slash(
        tree: Path, tmp_path: Path) -> None:
    ds = expand(url(tree, True), url(tmp_path / "out"), recursive=True, max_files=100)
    assert "sub/c.h5" in rels(ds) and "sub/deep/d.txt" in rels(ds)
    assert ds.count == 8 and ds.skipped_dirs == 0
    deep = next(f for f in ds.files if f.rel_path == "sub/deep/d.txt")
    assert deep.src_url == url(tree / "sub" / "deep" / "d.txt")
    assert deep.dest_url == url(tmp_path / "out" / "sub" / "deep" / "d.txt")
    assert deep.size_bytes == 13


@pytest.mark.parametrize("pattern, expected", [
    ("*.h5", [".hidden.h5", "a.h5", "b.h5", "link.h5", "sp ace.h5"]),
    ("[ab].h5", ["a.h5", "b.h5"]),
    ("?.h5", ["a.h5", "b.h5"]),
    ("*.txt", ["notes.txt"]),  # sub/deep/d.txt is not in the top directory
    ("sp%20*", ["sp ace.h5"]),  # the pattern is percent-decoded like the rest of the URL
])
def test_a_glob_matches_names_in_its_directory(tree: Path, tmp_path: Path, pattern: str,
                                               expected: list[str]) -> None:
    ds = expand(url(tree) + "/" + pattern, url(tmp_path / "out", True), max_files=100)
    assert rels(ds) == expected


def test_a_recursive_glob_copies_matching_directories_whole(tree: Path, tmp_path: Path) -> None:
    ds = expand(url(tree) + "/s*", url(tmp_path, True), recursive=True, max_files=100)
    assert rels(ds) == ["sp ace.h5", "sub/c.h5", "sub/deep/d.txt"]


def test_a_symlink_loop_is_refused_naming_the_link(tree: Path, tmp_path: Path) -> None:
    (tree / "sub" / "deep" / "up").symlink_to("../..")
    with pytest.raises(DatasetError, match="symlink loop") as caught:
        expand(url(tree, True), url(tmp_path, True), recursive=True, max_files=100)
    assert caught.value.where == url(tree) + "/sub/deep/up/"
    assert str(caught.value).startswith(url(tree) + "/sub/deep/up/: a symlink loop: this is "
                                        + url(tree, True) + " again")
    # not recursive: the link is a subdirectory left out, no error
    assert expand(url(tree / "sub" / "deep", True), url(tmp_path, True),
                  max_files=10).skipped_dirs == 1


def test_a_loop_through_two_links_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "x" / "f").write_text("1")
    (tmp_path / "x" / "to_y").symlink_to("../y")
    (tmp_path / "y" / "to_x").symlink_to("../x")
    with pytest.raises(DatasetError, match=r"/x/to_y/to_x/: a symlink loop: this is .*/x/ "):
        expand(url(tmp_path / "x", True), url(tmp_path / "out", True), recursive=True,
               max_files=100)


def test_two_links_to_one_directory_are_not_a_loop(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "f").write_text("1")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "one").symlink_to("../shared")
    (tmp_path / "d" / "two").symlink_to("../shared")
    ds = expand(url(tmp_path / "d", True), url(tmp_path / "out", True), recursive=True,
                max_files=10)
    assert rels(ds) == ["one/f", "two/f"]


def test_a_missing_directory_is_refused_clearly(tmp_path: Path) -> None:
    missing = url(tmp_path / "nope", True)
    with pytest.raises(DatasetError) as caught:
        expand(missing, url(tmp_path / "out", True), max_files=10)
    assert str(caught.value) == f"{missing}: no such directory"
    assert not isinstance(caught.value, DatasetUnreachable)  # listing again will not help
    with pytest.raises(DatasetError, match=r"/nope/: no such directory"):
        expand(url(tmp_path / "nope") + "/*.h5", url(tmp_path, True), max_files=10)


def test_a_file_named_as_a_directory_is_refused(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"/a\.h5/: not a directory$"):
        expand(url(tree / "a.h5", True), url(tmp_path, True), max_files=10)


def test_a_dangling_symlink_and_a_fifo_are_refused_by_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "gone").symlink_to("/nonexistent/target")
    with pytest.raises(DatasetError) as caught:
        expand(url(data, True), url(tmp_path, True), max_files=10)
    assert str(caught.value) == (f"{url(data)}/gone: a symlink to /nonexistent/target, "
                                 "which does not exist")
    (data / "gone").unlink()
    os.mkfifo(data / "pipe")
    with pytest.raises(DatasetError, match=r"/pipe: not a regular file or a directory"):
        expand(url(data, True), url(tmp_path, True), max_files=10)


def test_a_name_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.close(os.open(os.fsencode(data) + b"/bad\xff.h5", os.O_CREAT | os.O_WRONLY, 0o644))
    with pytest.raises(DatasetError, match=r"the name 'bad\\udcff.h5' is not valid UTF-8"):
        expand(url(data, True), url(tmp_path, True), max_files=10)


def test_empty_datasets_are_refused(tree: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError) as caught:
        expand(url(empty, True), url(tmp_path, True), max_files=10)
    assert str(caught.value) == f"{url(empty, True)}: no files in this directory"
    with pytest.raises(DatasetError) as caught:
        expand(url(tree) + "/*.nc", url(tmp_path, True), max_files=10)
    assert str(caught.value) == f"{url(tree)}/*.nc: no files match '*.nc' in {url(tree, True)}"
    only_dirs = tmp_path / "only_dirs"
    (only_dirs / "a" / "b").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"no files in this directory \(1 subdirectory left "
                                           r"out: recursive is false\)"):
        expand(url(only_dirs, True), url(tmp_path, True), max_files=10)
    with pytest.raises(DatasetError, match=r"no files in this directory or below it$"):
        expand(url(only_dirs, True), url(tmp_path, True), recursive=True, max_files=10)


def test_more_files_than_the_limit_stop_the_listing_at_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(50):
        (data / f"f{i:02}").touch()
    counting = Counting(LocalLister())
    with pytest.raises(DatasetError) as caught:
        expand(url(data, True), url(tmp_path, True), max_files=10, lister=counting)
    message = str(caught.value)
    assert message.startswith(f"{url(data, True)}: more than {MAX_FILES_KNOB} = 10 files: "
                              "the listing was stopped at file 11 (")
    assert counting.pulled == 11  # not 50
    assert expand(url(data, True), url(tmp_path, True), max_files=50).count == 50


@pytest.mark.parametrize("src, dest, message", [
    ("file:///data/a.h5", "file:///out/", "not a dataset"),
    ("file:///data/", None, "a dataset needs dest_url"),
    ("file:///data/", "out/", "is not a URL of the form scheme://host/path"),
    ("file://host/data/", "file:///out/", "names host 'host'"),
    ("http://h/data/", "file:///out/", "^http://h/data/: http:// directories cannot be listed"),
    ("ftp://h/data#x/", "file:///out/", "has a query or a fragment"),
])
def test_bad_urls_are_refused(src: str, dest: str | None, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        expand(src, dest, max_files=10)


# -- an unreadable directory, listed with the rights of an unprivileged user ------------------

def list_as_unprivileged(src: str) -> str:
    """Expand `src` in a forked child with the rights of `nobody` (when we are root) or our
    own; its outcome comes back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, list, report, _exit
        outcome = "child failed"
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                entry = pwd.getpwnam("nobody")
                os.setgroups([])
                os.setgid(entry.pw_gid)
                os.setuid(entry.pw_uid)
            try:
                outcome = f"OK {expand(src, 'file:///out/', recursive=True, max_files=100).count}"
            except DatasetError as exc:
                outcome = f"{type(exc).__name__} {exc}"
        finally:
            os.write(write_end, outcome.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        outcome = answer.read().decode()
    os.waitpid(pid, 0)
    return outcome


@pytest.fixture
def open_tree() -> Iterator[Path]:
    """A tree in /tmp that `nobody` can reach (pytest's tmp_path is root's alone)."""
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root and there is no user 'nobody' to list as")
    top = Path(tempfile.mkdtemp(prefix="stork-dataset-"))
    top.chmod(0o755)
    yield top
    for path, _, _ in os.walk(top):
        os.chmod(path, 0o755)
    shutil.rmtree(top)


def test_an_unreadable_directory_is_refused_naming_it(open_tree: Path) -> None:
    data = open_tree / "data"
    (data / "locked").mkdir(parents=True)
    (data / "a.h5").write_text("a")
    (data / "locked" / "b.h5").write_text("b")
    (data / "locked").chmod(0)
    if os.geteuid() != 0 and os.access(data / "locked", os.R_OK):
        pytest.skip("this user reads a mode-000 directory (capabilities); nothing to refuse")
    assert list_as_unprivileged(url(data) + "/*.h5") == "OK 1"  # the child can list
    locked = url(data / "locked", True)
    assert list_as_unprivileged(locked) == f"DatasetError {locked}: permission denied"
    # found half way through a recursive listing: the whole expansion fails
    assert list_as_unprivileged(url(data, True)) == f"DatasetError {locked}: permission denied"


# -- url_list ---------------------------------------------------------------------------------

PAIRS = """\
# SOURCE DESTINATION, as globus-url-copy -f reads them

ftp://h.example.org/data/a.h5 file:///out/a.h5
\t"gsiftp://h.example.org:2811/data/b%20c.h5"   "file:///out/bc/"
   # an indented comment
file:///data/x.bin\tftp://other.example.org/in/y.bin
"""


@pytest.mark.parametrize("line, message", [
    ("ftp://h/a", "expected SOURCE DESTINATION, found 1 field$"),
    ("ftp://h/a file:///b file:///c", "found 3 fields"),
    ("ftp://h/a file:///b # a comment after the pair", "found 8 fields"),
    ('"ftp://h/a file:///b', "a double quote is not closed"),
    ('ftp://h/a"b" file:///b', "a double quote inside"),
    ('"ftp://h/a"x file:///b', "text right after the closing quote"),
    ("h/a file:///b", "source 'h/a': 'h/a' is not a URL"),
    ("ftp://h/a file:b", "destination 'file:b'"),
    ('"ftp://h/a b" file:///b', r"URL contains whitespace .*\(write a space in a URL as %20\)"),
    ("ftp://h/dir/ file:///b/", "is a directory; a url_list line names one file"),
    ("ftp://h/*.h5 file:///b/", "is a glob; a url_list line names one file"),
    ("ftp://h/a file:///out/", None),  # good: into the directory, keeping the name
])
def test_url_list_lines_are_checked_naming_the_line(line: str, message: str | None) -> None:
    text = f"# header\n\nftp://h/first file:///first\n{line}\n"
    if message is None:
        ds = expand(None, None, url_list_text=text, url_list_name="pairs.txt", max_files=10)
        assert ds.files[-1].dest_url == "file:///out/a"
        return
    with pytest.raises(DatasetError, match=f"^pairs.txt:4: .*{message}") as caught:
        expand(None, None, url_list_text=text, url_list_name="pairs.txt", max_files=10)
    assert caught.value.where == "pairs.txt:4"


def test_a_url_list_with_quotes_tabs_and_comments() -> None:
    ds = expand(None, None, url_list_text=PAIRS, url_list_name="pairs.txt", max_files=10)
    assert [(f.src_url, f.dest_url, f.rel_path, f.size_bytes) for f in ds.files] == [
        ("ftp://h.example.org/data/a.h5", "file:///out/a.h5", "a.h5", None),
        ("gsiftp://h.example.org:2811/data/b%20c.h5", "file:///out/bc/b%20c.h5", "b c.h5",
         None),
        ("file:///data/x.bin", "ftp://other.example.org/in/y.bin", "x.bin", None),
    ]
    assert ds.total_bytes is None  # sizes are learnt when the files move


def test_a_url_list_mapping_two_sources_to_one_destination_is_refused() -> None:
    text = ("ftp://h/one.dat file:///out/x.dat\n"
            "ftp://h/two.dat file:///out/y.dat\n"
            "# the same place, written differently\n"
            "ftp://h/three.dat file:///out/./x.dat\n")
    with pytest.raises(DatasetError) as caught:
        expand(None, None, url_list_text=text, url_list_name="pairs.txt", max_files=10)
    assert str(caught.value) == ("pairs.txt:4: two sources go to one destination "
                                 "file:///out/./x.dat: ftp://h/one.dat (line 1) and "
                                 "ftp://h/three.dat (line 4)")


def test_url_list_limits_and_emptiness() -> None:
    with pytest.raises(DatasetError, match=r"^pairs.txt: no SOURCE DESTINATION pairs"):
        expand(None, None, url_list_text="# nothing\n\n", url_list_name="pairs.txt",
               max_files=10)
    many = "".join(f"ftp://h/{i} file:///out/{i}\n" for i in range(100))
    with pytest.raises(DatasetError) as caught:
        expand(None, None, url_list_text=many, url_list_name="pairs.txt", max_files=20)
    assert str(caught.value).startswith(f"pairs.txt:21: more than {MAX_FILES_KNOB} = 20 files")
    with pytest.raises(DatasetError, match="give src_url and dest_url or url_list, not both"):
        expand("ftp://h/x/", "file:///out/", url_list_text=many, max_files=200)


# -- listers that misbehave ---------------------------------------------------------------

class Scripted(Lister):
    """A lister answering from a table: for the checks only a broken server could reach."""

    def __init__(self, listing: dict[str, list[Entry]], endless: bool = False) -> None:
        self.listing = listing
        self.endless = endless

    def list_dir(self, url: str) -> Iterator[Entry]:
        if self.endless:
            yield Entry("again", True)
        yield from self.listing.get(url, [])


def test_a_server_naming_a_file_twice_maps_two_sources_to_one_destination() -> None:
    lister = Scripted({"ftp://h/d/": [Entry("a", False, 1), Entry("a", False, 1)]})
    with pytest.raises(DatasetError, match=r"^file:///out/a: two sources go to one "
                                           r"destination: ftp://h/d/a is listed twice"):
        expand("ftp://h/d/", "file:///out/", max_files=10, lister=lister)


def test_a_server_side_loop_is_stopped_by_the_depth_limit() -> None:
    with pytest.raises(DatasetError, match="more than 256 directory levels deep"):
        expand("ftp://h/d/", "file:///out/", recursive=True, max_files=10,
               lister=Scripted({}, endless=True))


# -- 100,000 local files ----------------------------------------------------------------------

def test_a_listing_of_100000_local_files_is_accepted(tmp_path: Path) -> None:
    data = tmp_path / "many"
    data.mkdir()
    started = time.monotonic()
    fd = os.open(data, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(100_000):
            os.close(os.open(f"f{i:06}.dat", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    made = time.monotonic() - started
    started = time.monotonic()
    ds = expand(url(data, True), url(tmp_path / "out", True), max_files=100_000)
    listed = time.monotonic() - started
    assert ds.count == 100_000 and ds.total_bytes == 0
    assert ds.files[0].rel_path == "f000000.dat" and ds.files[-1].rel_path == "f099999.dat"
    print(f"\n100,000 local files: created in {made:.2f} s, expanded in {listed:.2f} s")


# -- through the real GridFTP server ----------------------------------------------------------

SIZES = {"a.h5": 1000, "b.h5": 123_457, "empty.h5": 0, "sp ace.dat": 77,
         "sub/c.h5": 4096, "sub/deep/d.h5": 5}


@pytest.fixture
def served(gridftp: GridFtpServer, tmp_path: Path) -> Path:
    data = tmp_path / "served"
    for i, (name, size) in enumerate(SIZES.items()):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        make_file(data / name, size, seed=i)
    return data


def ftp_dir(gridftp: GridFtpServer, path: Path) -> str:
    return gridftp.url(quote(str(path))) + "/"


@pytest.mark.parametrize("lister", [FtpLister, lambda: FtpLister(use_mlsd=False)],
                         ids=["mlsd", "nlst+size"])
def test_an_ftp_directory_is_listed_through_the_server_with_sizes(
        gridftp: GridFtpServer, served: Path, tmp_path: Path, lister: Callable[[], Lister]) -> None:
    ds = expand(ftp_dir(gridftp, served), url(tmp_path / "out"), recursive=True,
                max_files=100, lister=lister())
    assert {f.rel_path: f.size_bytes for f in ds.files} == SIZES
    assert ds.total_bytes == sum(SIZES.values())
    for f in ds.files:
        assert f.src_url == ftp_dir(gridftp, served) + quote(f.rel_path)
        assert f.dest_url == url(tmp_path / "out" / f.rel_path)
        assert size_of(f.src_url) == (served / f.rel_path).stat().st_size


def test_an_ftp_glob_and_a_flat_listing(gridftp: GridFtpServer, served: Path) -> None:
    ds = expand(ftp_dir(gridftp, served) + "*.h5", "file:///out/", max_files=100)
    assert rels(ds) == ["a.h5", "b.h5", "empty.h5"]
    ds = expand(ftp_dir(gridftp, served), "file:///out/", max_files=100)
    assert rels(ds) == ["a.h5", "b.h5", "empty.h5", "sp ace.dat"] and ds.skipped_dirs == 1


def test_the_gfal2_listing_gives_names_and_sizes(gridftp: GridFtpServer,
                                                 served: Path) -> None:
    ds = expand(ftp_dir(gridftp, served), "file:///out/", recursive=True, max_files=100,
                lister=RemoteLister())
    assert sorted(rels(ds)) == sorted(SIZES)
    assert ds.total_bytes == sum(SIZES.values())


@pytest.mark.parametrize("lister", [FtpLister, RemoteLister], ids=["ftp", "gfal2"])
def test_a_missing_remote_directory_is_refused_clearly(
        gridftp: GridFtpServer, tmp_path: Path, lister: Callable[[], Lister]) -> None:
    missing = ftp_dir(gridftp, tmp_path / "nope")
    with pytest.raises(DatasetError) as caught:
        expand(missing, "file:///out/", max_files=10, lister=lister())
    assert str(caught.value) == f"{missing}: no such directory"
    assert not isinstance(caught.value, DatasetUnreachable)


def test_a_remote_file_named_as_a_directory_is_refused(gridftp: GridFtpServer,
                                                       served: Path) -> None:
    with pytest.raises(DatasetError, match=r"/a\.h5/: not a directory$"):
        expand(ftp_dir(gridftp, served / "a.h5"), "file:///out/", max_files=10)


@pytest.mark.parametrize("lister", [FtpLister, RemoteLister], ids=["ftp", "gfal2"])
def test_the_remote_limit_stops_the_listing_and_the_lister_lists_again(
        gridftp: GridFtpServer, served: Path, lister: Callable[[], Lister]) -> None:
    counting = Counting(lister())
    with pytest.raises(DatasetError, match=f"more than {MAX_FILES_KNOB} = 2 files: the "
                                           "listing was stopped at file 3"):
        expand(ftp_dir(gridftp, served), "file:///out/", recursive=True, max_files=2,
               lister=counting)
    assert counting.pulled <= 4  # the stop came during the first directory (3 files + sub/)
    assert expand(ftp_dir(gridftp, served), "file:///out/", recursive=True, max_files=6,
                  lister=counting).count == 6


def test_an_ftp_server_that_is_not_there_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(DatasetUnreachable, match=f"cannot reach the server 127.0.0.1:"
                                                     f"{port}: .*Connection refused"):
            expand(f"ftp://127.0.0.1:{port}/data/", "file:///out/", max_files=10)


class TinyFtpServer:
    """Just enough of an FTP server for the FTP lister, on one control connection: a
    directory of `lines` files (``f<i>`` of i bytes), listed with MLSD when it accepts
    ``OPTS MLST`` (`mlst`), else with NLST, CWD and SIZE. `hang_up`: the MLSD listing is
    sent and both connections closed without a final reply. `batched`: it answers nothing
    until a whole batch of the lister's pipelined commands has come (the login ends with
    OPTS, a directory's with PASV), as a client that waits for each reply before the next
    command would never see it do. `commands`: what it was sent."""

    def __init__(self, lines: int, *, hang_up: bool = False, mlst: bool = True,
                 batched: bool = False) -> None:
        self.lines, self.hang_up, self.mlst, self.batched = lines, hang_up, mlst, batched
        self.commands: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.data_listener: socket.socket | None = None
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn, conn.makefile("rwb", buffering=0) as ctl:
            ctl.write(b"220 tiny test server\r\n")
            held: list[bytes] = []
            for raw in ctl:
                line = raw.decode().strip()
                self.commands.append(line)
                verb, _, arg = line.partition(" ")
                verb = verb.upper()
                if verb in ("MLSD", "NLST") and self.data_listener is not None:
                    if not self.listing(ctl, verb):
                        return  # hung up
                    continue
                held.append(self.reply(verb, arg))
                if not self.batched or verb in ("OPTS", "PASV"):
                    ctl.write(b"".join(held))
                    held = []

    def reply(self, verb: str, arg: str) -> bytes:
        if verb == "USER":
            return b"331 ok\r\n"
        if verb == "OPTS":
            return b"200 facts set\r\n" if self.mlst else b"500 unknown command\r\n"
        if verb == "CWD" and arg.rsplit("/", 1)[-1].startswith("f"):
            return b"550 not a directory\r\n"
        if verb == "SIZE":
            return f"213 {arg[1:]}\r\n".encode()
        if verb == "PASV":
            self.data_listener = socket.create_server(("127.0.0.1", 0))
            port = self.data_listener.getsockname()[1]
            return (f"227 Entering Passive Mode (127,0,0,1,{port >> 8},{port & 255})"
                    f"\r\n").encode()
        return b"230 ok\r\n" if verb == "PASS" else b"200 ok\r\n"

    def listing(self, ctl: BinaryIO, verb: str) -> bool:
        """The listing on the data connection; False when it hung up instead of ending."""
        assert self.data_listener is not None
        ctl.write(b"150 Here it comes\r\n")
        data, _ = self.data_listener.accept()
        with data:
            for i in range(self.lines):
                data.sendall(f"Type=file;Size={i}; f{i}\r\n".encode() if verb == "MLSD"
                             else f"f{i}\r\n".encode())
        self.data_listener.close()
        self.data_listener = None
        if self.hang_up:
            return False
        ctl.write(b"226 done\r\n")
        return True

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


def test_a_listing_cut_off_half_way_fails_whole_and_counts_nothing() -> None:
    server = TinyFtpServer(lines=5, hang_up=True)
    try:
        counting = Counting(FtpLister())
        with pytest.raises(DatasetUnreachable) as caught:
            expand(f"ftp://127.0.0.1:{server.port}/data/", "file:///out/", max_files=100,
                   lister=counting)
    finally:
        server.close()
    assert counting.pulled == 5  # five entries arrived, and none of them was kept
    assert str(caught.value).startswith(f"ftp://127.0.0.1:{server.port}/data/: the listing "
                                        "failed half way: EOFError")


@pytest.mark.parametrize("mlst", [True, False], ids=["mlsd", "nlst+size"])
def test_the_ftp_lister_sends_its_commands_in_two_batches(mlst: bool) -> None:
    """A server that answers only whole batches lists: the login and the directory's
    commands each go in one round trip; a server refusing OPTS MLST is listed with NLST."""
    server = TinyFtpServer(lines=3, mlst=mlst, batched=mlst)
    try:
        ds = expand(f"ftp://127.0.0.1:{server.port}/data/", "file:///out/", max_files=10,
                    lister=FtpLister())
    finally:
        server.close()
    assert {f.rel_path: f.size_bytes for f in ds.files} == {"f0": 0, "f1": 1, "f2": 2}
    assert server.commands[:7] == ["USER anonymous", "PASS anonymous@", "OPTS MLST Type;Size;",
                                   "CWD /data/", "TYPE A", "PASV",
                                   "MLSD" if mlst else "NLST"]


def test_local_listing_follows_a_symlinked_root(tree: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(tree)
    ds = expand(url(alias, True), url(tmp_path / "out", True), max_files=100)
    assert ds.count == 6
    assert stat.S_ISLNK(os.lstat(alias).st_mode)
