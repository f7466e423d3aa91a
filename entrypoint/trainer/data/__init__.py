"""The trainer's data, one module per format behind a registry (as `MODELS`, `ENGINES` and `SINKS`), with the
pieces every format shares beside them: the files a data folder holds (`documents`), the token cache that
tokenizes them once (`cache`), the window reader (`windows`), the batches a rank trains on (`batches`) and the
node's preparation of all that (`prepare`).

Adding a format: a module with a class that keeps `base.Format`, its name here in `FORMATS`, and the name in
`compiler.spec.schema.DataFormat`.
"""

from compiler.spec.schema import DataFormat
from entrypoint.trainer.data.base import Format
from entrypoint.trainer.data.chat import ChatFormat
from entrypoint.trainer.data.preference import PreferenceFormat
from entrypoint.trainer.data.text import TextFormat

FORMATS: dict[DataFormat, Format] = {
    DataFormat.text: TextFormat(),
    DataFormat.chat: ChatFormat(),
    DataFormat.preference: PreferenceFormat(),
}
"""`data.format` → the format, for every format the token cache holds (`tokens`: token files, read as they are)."""


def data_format(name: DataFormat) -> Format:
    return FORMATS[name]
