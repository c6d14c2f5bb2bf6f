# PipeDream's published layer profiles (graph.txt, MIT license), installed
# so that `pipedream plan --graph-txt` and the experiments can use them.
pipedreamprofilesdir = $(pkgdatadir)
nobase_dist_pipedreamprofiles_DATA = \
	profiles/pipedream/README.md \
	profiles/pipedream/LICENSE \
	profiles/pipedream/alexnet/graph.txt \
	profiles/pipedream/densenet121/graph.txt \
	profiles/pipedream/gnmt/graph.txt \
	profiles/pipedream/gnmt_large/graph.txt \
	profiles/pipedream/inception_v3/graph.txt \
	profiles/pipedream/inception_v3/graph_compressed.txt \
	profiles/pipedream/nasnetalarge/graph.txt \
	profiles/pipedream/nasnetamobile/graph.txt \
	profiles/pipedream/resnet101/graph.txt \
	profiles/pipedream/resnet18/graph.txt \
	profiles/pipedream/resnet50/graph.txt \
	profiles/pipedream/resnext101/graph.txt \
	profiles/pipedream/resnext50/graph.txt \
	profiles/pipedream/squeezenet1_0/graph.txt \
	profiles/pipedream/vgg16/graph.txt
