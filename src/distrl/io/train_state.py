"""What a checkpoint holds, whatever the algorithm: a runner hands over its named modules and
optimisers, the loop adds its counters and every rank's state, and this module turns them into
checkpoint files (safetensors + JSON, never pickle) and back.

Layout (format 2): ``model.safetensors`` holds ``<module>.<tensor>`` for every module (weights and
buffers such as normaliser statistics), ``optimizer.safetensors`` holds
``<optimiser>.<param index>.<state key>``, and ``state.json`` holds the format version, the
algorithm, the observation and action spaces, the counters, the resolved config, each
optimiser's parameter groups and one JSON object per rank.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from distrl.envs.spaces import space_from_json, space_to_json
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io import shards

FORMAT_VERSION = 2


class TrainState(ABC):
    """A runner's live state, by reference: the loop saves from and restores into it. Each ML
    framework supplies one (``ModuleTrainState`` for torch); the files are the same for all."""

    algorithm: str
    observation_space: gym.spaces.Space
    action_space: gym.spaces.Space

    @abstractmethod
    def model_tensors(self) -> dict[str, torch.Tensor]:
        """``<module>.<tensor>`` for every module: weights and buffers such as normalisers."""

    @abstractmethod
    def optimizer_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(``<optimiser>.<param index>.<state key>`` tensors, each optimiser's JSON settings)."""

    def optimizer_params(self) -> dict[str, list[torch.Tensor]]:
        """Each optimiser's parameters in the order its state is numbered; only a sharded
        learner's state needs them (to shape the tensors a checkpoint is read into)."""
        raise NotImplementedError(f"{type(self).__name__} holds no torch optimisers")

    @abstractmethod
    def load(
        self, model: dict[str, torch.Tensor], optimizer: dict[str, torch.Tensor], settings: dict[str, Any]
    ) -> None:
        """Restore what ``model_tensors`` and ``optimizer_state`` returned in an earlier run."""


@dataclass
class ModuleTrainState(TrainState):
    """Torch modules and optimisers."""

    algorithm: str
    observation_space: gym.spaces.Space
    action_space: gym.spaces.Space
    modules: dict[str, nn.Module]
    optimizers: dict[str, torch.optim.Optimizer]

    def model_tensors(self) -> dict[str, torch.Tensor]:
        return {
            f"{module_name}.{name}": tensor
            for module_name, module in self.modules.items()
            for name, tensor in module.state_dict().items()
        }

    def optimizer_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors, param_groups = {}, {}
        for optim_name, optimizer in self.optimizers.items():
            optim_state = optimizer.state_dict()
            param_groups[optim_name] = optim_state["param_groups"]
            for idx, per_param in optim_state["state"].items():
                for key, value in per_param.items():
                    tensors[f"{optim_name}.{idx}.{key}"] = torch.as_tensor(value)
        return tensors, param_groups

    def optimizer_params(self) -> dict[str, list[torch.Tensor]]:
        return {
            name: [p for group in optimizer.param_groups for p in group["params"]]
            for name, optimizer in self.optimizers.items()
        }

    def load(
        self, model: dict[str, torch.Tensor], optimizer: dict[str, torch.Tensor], settings: dict[str, Any]
    ) -> None:
        for module_name, module in self.modules.items():
            module.load_state_dict(ckpt.strip_prefix(model, f"{module_name}."))
        for optim_name, optim in self.optimizers.items():
            per_param: dict[int, dict[str, torch.Tensor]] = {}
            for key, value in ckpt.strip_prefix(optimizer, f"{optim_name}.").items():
                idx, name = key.split(".", 1)
                per_param.setdefault(int(idx), {})[name] = value
            optim.load_state_dict({"state": per_param, "param_groups": settings[optim_name]})


@dataclass
class SavedState:
    """A checkpoint read back: its ``state.json`` and its model tensors."""

    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @property
    def observation_space(self) -> gym.spaces.Space:
        return space_from_json(self.meta["observation_space"])

    @property
    def action_space(self) -> gym.spaces.Space:
        return space_from_json(self.meta["action_space"])

    def module_tensors(self, name: str) -> dict[str, torch.Tensor]:
        return ckpt.strip_prefix(self.tensors, f"{name}.")


def read_meta(files: ckpt.CheckpointFiles, where: Path) -> dict[str, Any]:
    """A checkpoint's ``state.json``, refusing formats this version cannot read."""
    meta = json.loads(files["state.json"])
    version = meta.get("format_version", 1)
    if version != FORMAT_VERSION:
        raise UserError(
            f"checkpoint {where} has format {version}; this distrl reads format {FORMAT_VERSION} "
            "(retrain, or evaluate it with the distrl version that wrote it)",
            code="checkpoint-format-unsupported",
        )
    return meta


def read_state(files: ckpt.CheckpointFiles, where: Path) -> SavedState:
    """A checkpoint's ``state.json`` and whole model tensors (a sharded one's gathered from its
    shards: one process)."""
    meta = read_meta(files, where)
    if meta.get("sharded"):
        return SavedState(meta, shards.read_whole(where / shards.MODEL_DIR))
    return SavedState(meta, ckpt.tensors_from_bytes(files["model.safetensors"]))


def saved_model(files: ckpt.CheckpointFiles, where: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's model tensors for ``first_difference``: a sharded one's as shapes only
    (``meta`` tensors: no values read)."""
    if json.loads(files["state.json"]).get("sharded"):
        found = shards.shapes(where / shards.MODEL_DIR)
        return {name: torch.empty(size, dtype=dtype, device="meta") for name, (size, dtype) in found.items()}
    return ckpt.tensors_from_bytes(files["model.safetensors"])


def launch_index(files: ckpt.CheckpointFiles | None) -> int:
    """How many times the run was started before this launch (0 for a fresh run)."""
    return 0 if files is None else json.loads(files["state.json"])["launch_index"] + 1


def parameter_digest(state: TrainState) -> str:
    """sha256 over every module's tensors but shards (each rank holds its own, and only one
    copy): equal on all ranks when they hold the same state."""
    sha = hashlib.sha256()
    for name, tensor in state.model_tensors().items():
        if shards.is_sharded({name: tensor}):
            continue
        sha.update(name.encode())
        sha.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return sha.hexdigest()


def state_files(state: TrainState, meta: dict[str, Any]) -> ckpt.CheckpointFiles:
    """The checkpoint files of ``state`` plus the loop's ``meta`` (counters, config, ranks); a
    sharded learner's ``state.json`` only (its tensors: ``write_shards``)."""
    optim_tensors, settings = state.optimizer_state()
    header = {**_header(state), "optimizer_param_groups": settings}
    model = state.model_tensors()
    if shards.is_sharded(model):
        # What the ranks' shards must add up to: checked before the checkpoint is completed.
        whole = {
            shards.MODEL_DIR: {name: list(tensor.shape) for name, tensor in model.items()},
            shards.OPTIMIZER_DIR: {name: list(tensor.shape) for name, tensor in optim_tensors.items()},
        }
        return {"state.json": ckpt.json_to_bytes({**header, **meta, "sharded": True, "shapes": whole})}
    return {
        "model.safetensors": ckpt.tensors_to_bytes(model),
        "optimizer.safetensors": ckpt.tensors_to_bytes(optim_tensors),
        "state.json": ckpt.json_to_bytes({**header, **meta}),
    }


def write_shards(state: TrainState, directory: Path) -> None:
    """Collective: this rank's shards of a sharded learner's ``state`` into ``directory``'s
    folders (``io.shards``)."""
    shards.write(directory / shards.MODEL_DIR, state.model_tensors())
    shards.write(directory / shards.OPTIMIZER_DIR, state.optimizer_state()[0])


def snapshot(state: TrainState, meta: dict[str, Any]) -> SavedState:
    """The model part of ``state`` as a checkpoint would read back, copied to the CPU: what a
    policy is rebuilt from elsewhere (the algorithm registry's ``deployable_policy``) without
    files. A sharded learner's is gathered whole: a collective."""
    tensors = {
        k: shards.full_tensor(v.detach()).to("cpu", copy=True) for k, v in state.model_tensors().items()
    }
    return SavedState({**_header(state), **meta}, tensors)


def _header(state: TrainState) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "algorithm": state.algorithm,
        "observation_space": space_to_json(state.observation_space),
        "action_space": space_to_json(state.action_space),
    }


def restore(state: TrainState, files: ckpt.CheckpointFiles, where: Path) -> dict[str, Any]:
    """Load checkpoint ``where`` (its small ``files`` read) into ``state``; return its
    ``state.json``. Check ``first_difference`` first: loading another network's tensors fails
    part-way. A sharded checkpoint's tensors are read from its folders by every rank, each the
    parts it holds (collective); a replicated one's come in ``files``, and a sharded learner
    keeps its shard of each."""
    meta = json.loads(files["state.json"])
    settings = meta["optimizer_param_groups"]
    model = state.model_tensors()
    if meta.get("sharded"):
        optimizer = optimizer_targets(state, shards.shapes(where / shards.OPTIMIZER_DIR))
        shards.read_into(where / shards.MODEL_DIR, model)
        shards.read_into(where / shards.OPTIMIZER_DIR, optimizer)
    else:
        saved = ckpt.tensors_from_bytes(files["model.safetensors"])
        optimizer = ckpt.tensors_from_bytes(files["optimizer.safetensors"])
        if shards.is_sharded(model):  # a sharded learner keeps its shard of each
            found = {name: (list(tensor.shape), tensor.dtype) for name, tensor in optimizer.items()}
            optimizer = shards.shard_like(optimizer_targets(state, found), optimizer)
        model = shards.shard_like(model, saved)
    state.load(model, optimizer, settings)
    return meta


def optimizer_targets(
    state: TrainState, found: dict[str, tuple[list[int], torch.dtype]]
) -> dict[str, torch.Tensor]:
    """Zero tensors to read each ``<optimiser>.<param index>.<key>`` of ``found`` into, shaped
    and sharded like its parameter (Adam's moments), or whole (its step count)."""
    params = state.optimizer_params()
    targets = {}
    for name, (size, dtype) in found.items():
        optimizer, index, _ = name.split(".", 2)
        param = params[optimizer][int(index)]
        like_param = list(param.shape) == size
        targets[name] = torch.zeros_like(param, dtype=dtype) if like_param else torch.zeros(size, dtype=dtype)
    return targets


def first_difference(saved: dict[str, torch.Tensor], built: dict[str, torch.Tensor]) -> str | None:
    """The first tensor whose shape differs or that only one of them has, said from the
    checkpoint's side; None when they hold the same names and shapes."""
    for name, tensor in built.items():
        if name not in saved:
            return f"lacks {name}, which this config builds"
        if saved[name].shape != tensor.shape:
            return f"holds {name} of shape {list(saved[name].shape)}, this config builds {list(tensor.shape)}"
    extra = next((name for name in saved if name not in built), None)
    return None if extra is None else f"holds {extra}, which this config does not build"
