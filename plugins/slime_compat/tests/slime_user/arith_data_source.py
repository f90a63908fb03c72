"""--data-source-path: a slime DataSource subclass serving the jsonl prompts in groups of
n_samples_per_prompt (the shape of slime's RolloutDataSource, without its buffer)."""

import copy
import json

from slime.rollout.data_source import DataSource
from slime.utils.types import Sample

from slime_user._record import record


class JsonlSource(DataSource):
    def __init__(self, args):
        super().__init__(args)
        with open(args.prompt_data, encoding="utf-8") as f:
            self.rows = [json.loads(line) for line in f if line.strip()]
        self.offset = 0
        self.group_index = 0
        self.sample_index = 0
        record("source_init", rows=len(self.rows))

    def get_samples(self, num_samples):
        groups = []
        for _ in range(num_samples):
            row = self.rows[self.offset % len(self.rows)]
            self.offset += 1
            proto = Sample(prompt=row[self.args.input_key], label=row[self.args.label_key])
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                s = copy.deepcopy(proto)
                s.group_index, s.index = self.group_index, self.sample_index
                self.sample_index += 1
                group.append(s)
            self.group_index += 1
            groups.append(group)
        record("source_get", n=num_samples, offset=self.offset)
        return groups

    def add_samples(self, samples):
        record("source_add", n=len(samples))

    def save(self, rollout_id):
        record("source_save", rollout_id=rollout_id, offset=self.offset)

    def load(self, rollout_id=None):
        record("source_load", rollout_id=rollout_id)

    def __len__(self):
        return len(self.rows)
