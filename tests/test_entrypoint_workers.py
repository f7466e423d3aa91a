"""`entrypoint.trainer.workers` forks multiprocessing's forkserver from torchrun's agent once the agent holds the
trainer, so that torch is imported once per node: a worker is a grandchild of the agent and finds the trainer
imported. Where multiprocessing's forkserver is not the one it knows, multiprocessing starts its own, preloading
the same modules."""

import dataclasses
import json
import subprocess
import sys
from multiprocessing import forkserver

from compiler.spec import Plan
from compiler.spec.schema import BaseQuantization
from entrypoint.trainer import workers
from tests.entrypoint_support import tiny_plan

CHECK = """
import importlib, json, multiprocessing, os, sys
from multiprocessing import forkserver
from entrypoint.trainer import workers

def report(queue):
    queue.put({"parent": os.getppid(), "trainer": "entrypoint.trainer.train" in sys.modules})

for module in workers.WARM:
    importlib.import_module(module)
workers.start_forkserver(workers.WARM)
server = forkserver._forkserver._forkserver_pid
context = multiprocessing.get_context("forkserver")
queue = context.SimpleQueue()
worker = context.Process(target=report, args=(queue,))
worker.start()
found = queue.get()
worker.join()
with open(f"/proc/{server}/stat") as stat:
    server_parent = int(stat.read().rsplit(")", 1)[1].split()[1])
with open(f"/proc/{server}/cmdline", "rb") as server_command, open("/proc/self/cmdline", "rb") as own:
    same_command = server_command.read() == own.read()
print(json.dumps({**found, "server": server, "server_parent": server_parent, "agent": os.getpid(),
                  "same_command": same_command, "exitcode": worker.exitcode}))
"""


def test_the_forkserver_is_forked_from_the_agent_and_its_workers_find_the_trainer_imported():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert (found["server_parent"], found["parent"]) == (found["agent"], found["server"])
    assert found["same_command"] and found["trainer"] and found["exitcode"] == 0


def test_an_unknown_forkserver_client_gets_multiprocessings_own_preloading_the_trainer(monkeypatch):
    monkeypatch.setattr(workers, "FORKSERVER_STATE", {"_forkserver_authkey", *workers.FORKSERVER_STATE})
    monkeypatch.setattr(forkserver._forkserver, "_preload_modules", forkserver._forkserver._preload_modules)
    workers.start_forkserver(workers.WARM)
    assert forkserver._forkserver._preload_modules == [*workers.WARM, "entrypoint.trainer.workers"]


def test_a_hugging_face_plan_holds_transformers_and_peft_unless_its_base_is_quantized():
    decoder = tiny_plan()
    hf = dataclasses.replace(decoder, model=dataclasses.replace(decoder.model, family="hf"))

    def with_lora(quantize_base: BaseQuantization) -> Plan:
        lora = dataclasses.replace(hf.model.lora, rank=8, quantize_base=quantize_base)
        return dataclasses.replace(hf, model=dataclasses.replace(hf.model, lora=lora))

    assert workers.warm_modules(decoder) == workers.WARM
    assert workers.warm_modules(hf) == [*workers.WARM, "transformers.modeling_utils"]
    assert workers.warm_modules(with_lora(BaseQuantization.none))[-1] == "peft"
    assert workers.warm_modules(with_lora(BaseQuantization.nf4)) == workers.warm_modules(hf)  # peft loads bitsandbytes
