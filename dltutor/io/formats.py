"""One subset of Fashion-MNIST written four ways, and a Dataset that reads each back.

    files   one PNG per sample in class folders (`files/<label>/<id>.png`), read with torchvision's
            ImageFolder: one open() and one PNG decode per sample (seed 000's "millions of small
            files": metadata-hungry, random access)
    shards  WebDataset-style tar shards (`shards/shard-00000.tar` holding `<id>.png` + `<id>.cls`),
            each read front to back: few opens, sequential reads, still one PNG decode per sample
    memmap  the raw uint8 pixels in one file (`memmap/images.u8`, N x 28 x 28) + `labels.npy`,
            read with np.memmap: no decode, any sample by offset
    hdf5    the same raw arrays in one HDF5 file (`hdf5/data.h5`, datasets `images`, `labels`)

Every dataset yields (image uint8 tensor 1 x 28 x 28, label, sample id), so a round trip can be
checked byte for byte and a sharded read can be checked for coverage.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np

FORMATS = ("files", "shards", "memmap", "hdf5")
SHAPE = (28, 28)


def _png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(image, mode="L").save(buf, format="PNG")
    return buf.getvalue()


def _png_decode(data: bytes) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"))


def write_files(root, images, labels) -> list[Path]:
    """One PNG per sample under root/files/<label>/<id>.png; returns the paths."""
    paths = []
    for i, (img, lab) in enumerate(zip(images, labels)):
        path = Path(root) / "files" / str(int(lab)) / f"{i:06d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_png_bytes(img))
        paths.append(path)
    return paths


def write_shards(root, images, labels, per_shard: int) -> list[Path]:
    """Tar shards of `per_shard` samples (the last may be shorter): root/shards/shard-NNNNN.tar."""
    folder = Path(root) / "shards"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for start in range(0, len(images), per_shard):
        path = folder / f"shard-{start // per_shard:05d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(start, min(start + per_shard, len(images))):
                for name, data in ((f"{i:06d}.png", _png_bytes(images[i])),
                                   (f"{i:06d}.cls", str(int(labels[i])).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def write_memmap(root, images, labels) -> list[Path]:
    folder = Path(root) / "memmap"
    folder.mkdir(parents=True, exist_ok=True)
    out = np.memmap(folder / "images.u8", dtype=np.uint8, mode="w+", shape=images.shape)
    out[:] = images
    out.flush()
    del out
    np.save(folder / "labels.npy", np.asarray(labels, dtype=np.int64))
    return [folder / "images.u8", folder / "labels.npy"]


def write_hdf5(root, images, labels) -> list[Path]:
    import h5py
    path = Path(root) / "hdf5" / "data.h5"
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:  # contiguous (no chunking, no compression): plain reads
        f.create_dataset("images", data=images)
        f.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))
    return [path]


def write(fmt: str, root, images, labels, per_shard: int = 256) -> list[Path]:
    """Write `images` (N x 28 x 28 uint8) and `labels` in format `fmt`; returns the files."""
    if fmt == "shards":
        return write_shards(root, images, labels, per_shard)
    writers = {"files": write_files, "memmap": write_memmap, "hdf5": write_hdf5}
    if fmt not in writers:
        raise ValueError(f"unknown format {fmt!r}: choose from {', '.join(FORMATS)}")
    return writers[fmt](root, images, labels)


def files_of(fmt: str, root) -> list[Path]:
    """Every file format `fmt` has under `root` (for sizes, cache drops and staging)."""
    return sorted(p for p in (Path(root) / fmt).rglob("*") if p.is_file())


# ------------------------------------------------------------------------------ readers
def _to_tensor(pixels):
    import torch
    return torch.from_numpy(np.array(pixels, dtype=np.uint8, copy=True)).unsqueeze(0)


class FileDataset:
    """torchvision ImageFolder over root/files, returning (image, label, id)."""

    def __init__(self, root):
        from torchvision.datasets import ImageFolder
        self.folder = ImageFolder(str(Path(root) / "files"), loader=_read_png_file)
        self.ids = [int(Path(p).stem) for p, _ in self.folder.samples]
        self.labels = [int(c) for c in self.folder.classes]  # class folder names are the labels

    def __len__(self):
        return len(self.folder)

    def __getitem__(self, i):
        pixels, cls = self.folder[i]
        return _to_tensor(pixels), self.labels[cls], self.ids[i]


def _read_png_file(path):
    with open(path, "rb") as fh:
        return _png_decode(fh.read())


class MemmapDataset:
    """np.memmap over root/memmap; opened lazily so each DataLoader worker maps its own view."""

    def __init__(self, root):
        folder = Path(root) / "memmap"
        self.path, self.labels = folder / "images.u8", np.load(folder / "labels.npy")
        self._images = None

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if self._images is None:
            self._images = np.memmap(self.path, dtype=np.uint8, mode="r",
                                     shape=(len(self.labels),) + SHAPE)
        return _to_tensor(self._images[i]), int(self.labels[i]), int(i)


class H5Dataset:
    """h5py over root/hdf5/data.h5; the file is opened in each worker (h5py handles do not fork)."""

    def __init__(self, root):
        import h5py
        self.path = Path(root) / "hdf5" / "data.h5"
        with h5py.File(self.path, "r") as f:
            self.n = len(f["labels"])
        self._file = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import h5py
        if self._file is None:  # look the datasets up once: each lookup is a metadata read
            f = h5py.File(self.path, "r")
            self._file, self._images, self._labels = f, f["images"], f["labels"][:]
        return _to_tensor(self._images[i]), int(self._labels[i]), int(i)


def shard_samples(path):
    """Yield (image, label, id) from one tar shard, read front to back."""
    pending = {}
    with tarfile.open(path, "r|") as tar:  # "r|": a stream, no seeking back
        for member in tar:
            key, ext = os.path.splitext(member.name)
            pending.setdefault(key, {})[ext] = tar.extractfile(member).read()
            if len(pending[key]) == 2:
                rec = pending.pop(key)
                yield _to_tensor(_png_decode(rec[".png"])), int(rec[".cls"]), int(key)


def _shard_stream_cls():
    import torch.utils.data as tud

    class ShardStream(tud.IterableDataset):
        """The shards given, split over DataLoader workers (worker w reads shards[w::workers])."""

        def __init__(self, shards):
            super().__init__()
            self.shards = [Path(s) for s in shards]

        def __iter__(self):
            info = tud.get_worker_info()
            mine = self.shards if info is None else self.shards[info.id::info.num_workers]
            for shard in mine:
                yield from shard_samples(shard)

    return ShardStream


def shard_stream(shards):
    """An IterableDataset over `shards` (a list of tar paths: a rank passes its own share)."""
    return _shard_stream_cls()(shards)


INDEX = "shards.index.json"   # beside the shards folder, so that it is never taken for a shard


def shard_index(root) -> list:
    """[(shard name, png offset, png size, cls offset, cls size, id)] of every sample in the tar
    shards, by id: where each member's bytes lie, read from the tar headers once and kept in
    root/INDEX (so a timed pass never reads headers). A random reader needs it; a stream does not."""
    path = Path(root) / INDEX
    if path.is_file():
        return [tuple(x) for x in json.loads(path.read_text())]
    rows = []
    for shard in files_of("shards", root):
        members = {}
        with tarfile.open(shard, "r:") as tar:
            for m in tar.getmembers():
                key, ext = os.path.splitext(m.name)
                members.setdefault(key, {})[ext] = (m.offset_data, m.size)
        rows += [(shard.name, *v[".png"], *v[".cls"], int(k)) for k, v in members.items()]
    rows.sort(key=lambda r: r[-1])
    path.write_text(json.dumps(rows))
    return rows


class ShardMembers:
    """The tar shards read at random, one sample at a time (map-style, for a DistributedSampler):
    the same files and bytes as `shard_stream`, but a seek and two small reads per sample."""

    def __init__(self, root):
        self.folder, self.items, self._open = Path(root) / "shards", shard_index(root), {}

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        name, png_at, png_n, cls_at, cls_n, key = self.items[i]
        fh = self._open.get(name) or self._open.setdefault(name, open(self.folder / name, "rb"))
        fh.seek(png_at)
        png = fh.read(png_n)
        fh.seek(cls_at)
        return _to_tensor(_png_decode(png)), int(fh.read(cls_n)), key


def dataset(fmt: str, root, shards=None):
    """The reader of format `fmt` under `root` (for 'shards': all shards, or the ones given)."""
    if fmt == "shards":
        return shard_stream(files_of("shards", root) if shards is None else shards)
    readers = {"files": FileDataset, "memmap": MemmapDataset, "hdf5": H5Dataset}
    if fmt not in readers:
        raise ValueError(f"unknown format {fmt!r}: choose from {', '.join(FORMATS)}")
    return readers[fmt](root)
