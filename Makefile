# Atelier — set-up and everyday commands. Every target creates .venv on first use.
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export GRADIO_ANALYTICS_ENABLED := False

.PHONY: install demo test serve bench weights clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	# torch first, with plain pip: the pinned pair installs from the local wheel store
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1
	$(PIP) install -q -e '.[app,test,decord]'
	# the optional sam2 package (an sdist built against the torch above; no CUDA kernels): its tests skip without it
	SAM2_BUILD_CUDA=0 $(PIP) install -q --no-build-isolation 'sam2==1.1.0' || echo "sam2 package not installed: its tracker tests will skip"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	.venv/bin/atelier demo -o outputs/demo

test: $(STAMP)
	$(PY) -m pytest tests

serve: $(STAMP)
	.venv/bin/atelier serve

bench: $(STAMP)
	$(PY) -m benchmarks.video_io
	$(PY) -m benchmarks.worldgen
	$(PY) -m benchmarks.builtin
	$(PY) -m benchmarks.vlm_perception

# Train the built-in models from scratch (the cards give each one's time on this machine); resumes if interrupted.
# The Bernini renderer (~1.5 h on one core) and planner (three runs, ~4 h) train on pools cached in outputs/bernini_data.
PLANNER_FLAGS = --mrope-layout interleaved --attribute-loss 1 --full-mask 0.5 --denoising-steps 25 --img-cfg 2.5
weights: $(STAMP)
	$(PY) -m training.vit --out weights/builtin/vit
	$(PY) -m training.vlm --out weights/builtin/vlm --vit weights/builtin/vit
	$(PY) -m training.renderer --out weights/builtin/renderer
	$(PY) -m training.planner --out outputs/train/planner_irope_scratch $(PLANNER_FLAGS) --steps 4000
	$(PY) -m training.planner --out outputs/train/planner_irope_lc5 --init outputs/train/planner_irope_scratch $(PLANNER_FLAGS) --regression-loss 1 --local-context 5 --steps 1500
	$(PY) -m training.planner --out weights/builtin/planner --init outputs/train/planner_irope_lc5 $(PLANNER_FLAGS) --regression-loss 1 --local-context 5 --steps 8000 --stop-at 5000
	$(PY) -m training.planner --out weights/builtin/planner --eval-only --txt-cfg 6
	# the layout planner (Bernini's t2v / r2v planner, planners.semantic.by_task): both parts, then the writer alone
	$(PY) -m training.layout_planner --out outputs/train/layout_stage1 --steps 3000
	$(PY) -m training.layout_planner --out weights/builtin/layout_planner --parts writer --init outputs/train/layout_stage1 --steps 4000
	$(PY) -m training.instances --out weights/builtin/instances
	$(PY) -m training.skeleton_planner --out weights/builtin/skeleton_planner
	$(PY) -m training.motion_renderer --out weights/builtin/motion_renderer
	# HUMOR: the shipped recipe pins its data (four templates, no topic slot); the recipes' defaults are newer (docs/humor.md)
	$(PY) -m training.humor_sft --out outputs/train/humor_sft_base --hold-out crowd,hide --no-topic-slot --topic-rate 0.25
	$(PY) -m training.humor_sft --base outputs/train/humor_sft_base --steps 300 --lr 5e-4 --name-slots --no-topic-slot --topic-rate 0.25 --hold-out crowd,hide --out weights/builtin/meme_writer_sft
	$(PY) -m training.humor_rm --hold-out crowd,hide --out weights/builtin/meme_rm
	$(PY) -m training.humor_rl --sft weights/builtin/meme_writer_sft --reward-model weights/builtin/meme_rm --hold-out crowd,hide --out weights/builtin/meme_writer
	$(PY) -m training.gelvr_sft --variant full --image-tokens objects --lambda-pointer 1.0 --object-reads symbols --image-positions shared --answer-pointer --steps 750 --eval-every 250 --out weights/builtin/latent_reasoner_sft
	$(PY) -m training.gelvr_rl --init weights/builtin/latent_reasoner_sft --out weights/builtin/latent_reasoner

clean:
	rm -rf outputs .pytest_cache
