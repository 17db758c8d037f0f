"""A policy's memory: a recurrent core (LSTM or GRU, ``model.memory``) between the encoder and
the actor and critic heads, which share it (CleanRL's LSTM Atari PPO).

One env's state is one flat vector (an LSTM's hidden and cell states side by side), so rollout
storage, env-worker messages and exported policies carry a single tensor whatever the core; a
policy without memory has states of width 0. The state is zeroed after a step that ended the
agent's episode, by the same multiplication in acting and in the update, so the update replays
the states acting had.
"""

from __future__ import annotations

import torch
from torch import nn


class RecurrentCore(nn.Module):
    def __init__(self, kind: str, n_in: int, size: int) -> None:
        """``kind``: ``lstm`` or ``gru``; ``size``: hidden units (the heads' input width)."""
        super().__init__()
        self.cell: nn.LSTMCell | nn.GRUCell = (nn.LSTMCell if kind == "lstm" else nn.GRUCell)(n_in, size)
        self.size = size
        self.state_size = 2 * size if kind == "lstm" else size
        # CleanRL's LSTM PPO: orthogonal weights, zero biases.
        for name, param in self.cell.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of ``[rows, n_in]`` inputs from ``[rows, state_size]`` states: (outputs, next states)."""
        if isinstance(self.cell, nn.LSTMCell):
            hidden, cell = self.cell(x, tuple(state.split(self.size, dim=-1)))
            return hidden, torch.cat([hidden, cell], dim=-1)
        hidden = self.cell(x, state)
        return hidden, hidden

    def sequence(self, x: torch.Tensor, start_states: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """Outputs ``[steps, chunks, size]`` of ``[steps, chunks, n_in]`` inputs, each chunk starting
        from its row of ``start_states`` and reset after the steps ``dones`` marks (truncated
        backpropagation through time: gradients stop at the chunk's start)."""
        state, outputs = start_states, []
        for t in range(x.shape[0]):
            if t > 0:
                state = reset_ended(state, dones[t - 1])
            out, state = self.step(x[t], state)
            outputs.append(out)
        return torch.stack(outputs)


def reset_ended(state: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
    """``state`` with the rows of envs whose episode ended (``dones`` 1 or True) zeroed."""
    if state.shape[-1] == 0:  # no memory: nothing to reset, and acting's every step skips the work
        return state
    return state * (1.0 - dones.to(state.dtype)).unsqueeze(-1)


def policy_state_size(policy: nn.Module) -> int:
    """The width of the memory state a deployable policy takes and gives (0: it has none)."""
    return getattr(policy, "state_size", 0)
