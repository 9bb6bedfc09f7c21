"""The Pipeline base: components by name, save/load through pipeline.json, overrides, outputs."""

import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from core.errors import InputError
from core.video import Video
from pipelines.base import ComponentSpec, Pipeline, PipelineConfig, PipelineOutput, component_backend, output_field


def tiny_vision_encoder():
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(0)
    cfg = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
    return SiglipVisionModel(cfg).eval()


@dataclass
class EmbedConfig(PipelineConfig):
    num_frames: int = 4


@dataclass(repr=False)
class EmbedOutput(PipelineOutput):
    frames: np.ndarray = output_field("video")
    embeddings: np.ndarray = output_field("npy")
    masks: np.ndarray = output_field("masks")
    note: str = "ok"


class EmbedPipeline(Pipeline):
    """A minimal pipeline: sample frames, embed them with a vision encoder, mark bright pixels."""

    component_specs = {"encoder": ComponentSpec(help="a vision encoder")}
    config_class = EmbedConfig

    @torch.no_grad()
    def __call__(self, video, generator: torch.Generator | None = None) -> EmbedOutput:
        frames = Video(video, height=32, width=32).sample(self.config.num_frames)
        x = torch.from_numpy(frames).permute(0, 3, 1, 2).float().div(127.5).sub(1)
        if generator is not None:  # noise only from the caller's generator
            x = x + 0.01 * torch.randn(x.shape, generator=generator)
        emb = [self.encoder(pixel_values=x[i : i + 1]).pooler_output[0] for i in self.progress_bar(range(len(x)), desc="embed")]
        masks = (frames.mean(-1) > 128).astype(np.uint8)
        return EmbedOutput(frames=frames, embeddings=torch.stack(emb).numpy(), masks=masks, note="ok", config={"num_frames": self.config.num_frames})


@pytest.fixture
def video():
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (12, 40, 40, 3), dtype=np.uint8)


def test_save_load_roundtrip_gives_identical_outputs(tmp_path, video):
    pipe = EmbedPipeline(EmbedConfig(num_frames=3), encoder=tiny_vision_encoder())
    pipe.set_progress_bar_config(disable=True)
    a = pipe(video, generator=torch.Generator().manual_seed(1))
    pipe.save_pretrained(tmp_path / "p")
    index = json.loads((tmp_path / "p" / "pipeline.json").read_text())
    assert index["_class_name"] == "EmbedPipeline" and index["config"] == {"num_frames": 3}
    assert index["components"]["encoder"]["class"].endswith("SiglipVisionModel")
    loaded = EmbedPipeline.from_pretrained(tmp_path / "p")
    loaded.set_progress_bar_config(disable=True)
    b = loaded(video, generator=torch.Generator().manual_seed(1))
    assert a.embeddings.shape == (3, 32)
    np.testing.assert_allclose(a.embeddings, b.embeddings, atol=1e-6)
    c = loaded(video, generator=torch.Generator().manual_seed(2))
    assert not np.allclose(a.embeddings, c.embeddings)  # the generator really drives the noise


def test_component_override_by_instance_and_by_directory(tmp_path, video):
    pipe = EmbedPipeline(encoder=tiny_vision_encoder())
    pipe.save_pretrained(tmp_path / "p")
    other = tiny_vision_encoder()
    with torch.no_grad():
        other.post_layernorm.bias.fill_(0.5)
    other.save_pretrained(tmp_path / "other")
    by_dir = EmbedPipeline.from_pretrained(tmp_path / "p", encoder=str(tmp_path / "other"))
    by_obj = EmbedPipeline.from_pretrained(tmp_path / "p", encoder=other)
    assert torch.allclose(by_dir.encoder.post_layernorm.bias, torch.full((32,), 0.5))
    assert by_obj.encoder is other
    with pytest.raises(InputError, match="vae"):
        EmbedPipeline.from_pretrained(tmp_path / "p", vae=other)


def test_to_device_and_dtype(video):
    pipe = EmbedPipeline(encoder=tiny_vision_encoder()).to("cpu", "bfloat16")
    assert pipe.encoder.dtype == torch.bfloat16 and pipe.device == torch.device("cpu")
    with pytest.raises(InputError, match="dtype"):
        pipe.to(dtype="float8")


def test_bad_construction_and_loading(tmp_path):
    with pytest.raises(InputError, match="needs"):
        EmbedPipeline()
    with pytest.raises(InputError, match="takes only"):
        EmbedPipeline(encoder=None, tracker=None)
    with pytest.raises(InputError, match="pipeline.json"):
        EmbedPipeline.from_pretrained(tmp_path)
    (tmp_path / "pipeline.json").write_text(json.dumps({"format_version": 1, "_class_name": "EmbedPipeline", "_module": __name__,
        "config": {}, "components": {"encoder": {"class": "os.system", "backend": "hf"}}}))
    with pytest.raises(InputError, match="trusted"):
        EmbedPipeline.from_pretrained(tmp_path)


def test_output_save_writes_every_artefact(tmp_path, video):
    pipe = EmbedPipeline(encoder=tiny_vision_encoder())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(video)
    out.save(tmp_path / "run")
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == [".atelier-output.json", "config.json", "embeddings.npy", "frames.mp4", "masks", "masks.rle.json", "result.json"]
    assert len(Video(tmp_path / "run" / "frames.mp4")) == 4
    assert len(list((tmp_path / "run" / "masks").glob("*.png"))) == 4
    rle = json.loads((tmp_path / "run" / "masks.rle.json").read_text())
    from core.masks import rle_decode

    first = rle["annotations"][0]
    np.testing.assert_array_equal(rle_decode(first["rle"]), out.masks[first["frame"]] == first["id"])
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert res == {"note": "ok"} and np.load(tmp_path / "run" / "embeddings.npy").shape == (4, 32)
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"num_frames": 4}
    assert "array(4, 32, 32, 3) uint8" in repr(out) and len(repr(out)) < 300  # shapes, not pixels


@dataclass(repr=False)
class PoseOutput(PipelineOutput):
    keypoints: np.ndarray = output_field("keypoints")
    image: np.ndarray = output_field("image")
    raw: np.ndarray = output_field("npy")
    scratch: np.ndarray = output_field("none")


def test_save_follows_declarations_not_shapes(tmp_path):
    kp = np.zeros((2, 17, 3), np.float32)
    kp[:, :, :2] = np.arange(34).reshape(17, 2)
    kp[:, :, 2] = 2
    out = PoseOutput(keypoints=kp, image=np.zeros((8, 8, 3), np.uint8), raw=np.zeros((2, 2)), scratch=np.ones((4, 4, 3), np.uint8))
    out.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".atelier-output.json", "image.png", "keypoints.coco.json", "raw.npy", "result.json"]
    coco = json.loads((tmp_path / "keypoints.coco.json").read_text())
    assert len(coco["annotations"]) == 2 and coco["annotations"][0]["num_keypoints"] == 17
    assert coco["annotations"][0]["keypoints"][:3] == [0, 1, 2]
    with pytest.raises(InputError, match="save"):
        output_field("gif")
    with pytest.raises(InputError, match="3 dimensions"):
        PoseOutput(keypoints=np.zeros(3), image=None, raw=None, scratch=None).save(tmp_path / "bad")
    pil = out.convert("pil")
    assert pil.image.size == (8, 8) and out.convert("pt").image.shape == (3, 8, 8)
    with pytest.raises(InputError, match="output_type"):
        out.convert("gif")


class VisionLike:
    """A component that claims a protocol it does not implement."""

    def save_pretrained(self, d): ...

    @classmethod
    def from_pretrained(cls, d): return cls()


def test_components_are_typed_and_backends_inferred():
    from planners.protocol import VisionLanguageModel

    class Typed(Pipeline):
        component_specs = {"vlm": ComponentSpec(VisionLanguageModel)}

    with pytest.raises(InputError, match="lacks .*option_posterior"):
        Typed(vlm=VisionLike())
    assert component_backend(tiny_vision_encoder()) == "hf"  # a transformers model is never "builtin"
    assert component_backend(VisionLike()) == "custom"


def test_override_by_directory_uses_the_slot_loader_and_fills_absent_optional_slots(tmp_path, tiny_vlm_dirs):
    """A saved builtin GridProbe pipeline takes a transformers checkpoint by directory for any slot
    (it used to raise KeyError: 'vit'), and an override for its empty answerer slot loads it."""
    from pipelines.gridprobe import GridProbeConfig, GridProbePipeline
    from planners.builtin import load_builtin_vlm

    GridProbePipeline(GridProbeConfig(grid=2), selector=load_builtin_vlm()).save_pretrained(tmp_path / "builtin")
    hf = str(tiny_vlm_dirs["qwen2.5-vl"])
    pipe = GridProbePipeline.from_pretrained(tmp_path / "builtin", selector=hf)
    assert pipe.selector.backend == "hf" and pipe.answerer is None
    pipe = GridProbePipeline.from_pretrained(tmp_path / "builtin", answerer=hf)
    assert pipe.selector.backend == "builtin" and pipe.answerer.backend == "hf"
    with pytest.raises(InputError, match="no config.json"):
        GridProbePipeline.from_pretrained(tmp_path / "builtin", answerer=str(tmp_path))
